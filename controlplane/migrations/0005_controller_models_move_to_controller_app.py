"""The controller's models now belong to the ``controller`` app (``controller.0001``): drop them from
this app's state only; their tables and rows stay. Their content types follow them, so permissions
granted on them keep working."""

from django.db import migrations

MODELS = ("replicagroup", "replica", "transition", "controllerconfigentry")


def move_content_types(apps, schema_editor, source="controlplane", target="controller"):
    ContentType = apps.get_model("contenttypes", "ContentType")
    taken = set(ContentType.objects.filter(app_label=target, model__in=MODELS).values_list("model", flat=True))
    ContentType.objects.filter(app_label=source, model__in=set(MODELS) - taken).update(app_label=target)


def move_content_types_back(apps, schema_editor):
    move_content_types(apps, schema_editor, source="controller", target="controlplane")


class Migration(migrations.Migration):

    dependencies = [
        ('contenttypes', '0002_remove_content_type_name'),
        ('controlplane', '0004_isolation'),
        ('controller', '0001_initial'),
        ('audits', '0002_finding_transition_in_controller_app'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.RemoveField(model_name='replica', name='group'),
                migrations.DeleteModel(name='ControllerConfigEntry'),
                migrations.DeleteModel(name='Transition'),
                migrations.DeleteModel(name='Replica'),
                migrations.DeleteModel(name='ReplicaGroup'),
            ],
        ),
        migrations.RunPython(move_content_types, move_content_types_back),
    ]
