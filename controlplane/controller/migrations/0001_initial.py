"""The controller's models become the ``controller`` app's: state only. Their tables were created by
``controlplane.0002`` and keep their names (Meta.db_table), so an existing database keeps its rows and
a fresh one gets the tables from there; ``controlplane.0005`` drops them from the old app's state."""

import django.contrib.postgres.fields
import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('controlplane', '0002_controllerconfigentry_replicagroup_transition_and_more'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.CreateModel(
                    name='ControllerConfigEntry',
                    fields=[
                        ('key', models.CharField(max_length=100, primary_key=True, serialize=False)),
                        ('value', models.JSONField()),
                        ('updated_at', models.DateTimeField(auto_now=True)),
                    ],
                    options={
                        'db_table': 'controlplane_controllerconfigentry',
                    },
                ),
                migrations.CreateModel(
                    name='ReplicaGroup',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('cluster_name', models.CharField(db_index=True, max_length=255)),
                        ('broker_name', models.CharField(max_length=255, unique=True)),
                        ('master_broker_id', models.BigIntegerField(blank=True, null=True)),
                        ('master_epoch', models.IntegerField(default=0)),
                        ('sync_state_set_epoch', models.IntegerField(default=0)),
                        ('next_assign_broker_id', models.BigIntegerField(default=1)),
                        ('updated_at', models.DateTimeField(auto_now=True)),
                    ],
                    options={
                        'db_table': 'controlplane_replicagroup',
                        'ordering': ['cluster_name', 'broker_name'],
                        'constraints': [models.CheckConstraint(condition=models.Q(('master_epoch__gte', 0)), name='group_master_epoch_not_negative'), models.CheckConstraint(condition=models.Q(('sync_state_set_epoch__gte', 0)), name='group_ss_epoch_not_negative'), models.CheckConstraint(condition=models.Q(('next_assign_broker_id__gte', 1)), name='group_next_id_positive')],
                    },
                ),
                migrations.CreateModel(
                    name='Transition',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('cluster_name', models.CharField(max_length=255)),
                        ('broker_name', models.CharField(db_index=True, max_length=255)),
                        ('kind', models.CharField(choices=[('elect', 'elect master'), ('alter', 'alter SyncStateSet'), ('apply_broker_id', 'apply broker id'), ('update_address', 'update broker address'), ('clean', 'clean broker data')], max_length=20)),
                        ('trigger', models.CharField(max_length=20)),
                        ('requested_by', models.CharField(blank=True, default='', max_length=255)),
                        ('requested_broker_id', models.BigIntegerField(blank=True, null=True)),
                        ('old_master_broker_id', models.BigIntegerField(blank=True, null=True)),
                        ('new_master_broker_id', models.BigIntegerField(blank=True, null=True)),
                        ('old_master_epoch', models.IntegerField()),
                        ('new_master_epoch', models.IntegerField()),
                        ('old_sync_state_set_epoch', models.IntegerField()),
                        ('new_sync_state_set_epoch', models.IntegerField()),
                        ('old_sync_state_set', django.contrib.postgres.fields.ArrayField(base_field=models.BigIntegerField(), default=list, size=None)),
                        ('new_sync_state_set', django.contrib.postgres.fields.ArrayField(base_field=models.BigIntegerField(), default=list, size=None)),
                        ('candidates', models.JSONField(blank=True, default=list)),
                        ('response_code', models.IntegerField()),
                        ('detail', models.TextField(blank=True, default='')),
                        ('created_at', models.DateTimeField(auto_now_add=True, db_index=True)),
                    ],
                    options={
                        'db_table': 'controlplane_transition',
                        'ordering': ['id'],
                        'constraints': [models.UniqueConstraint(condition=models.Q(('kind', 'elect')), fields=('broker_name', 'new_master_epoch'), name='one_elect_per_master_epoch'), models.CheckConstraint(condition=models.Q(('new_master_epoch__gte', models.F('old_master_epoch'))), name='master_epoch_never_decreases'), models.CheckConstraint(condition=models.Q(('new_sync_state_set_epoch__gte', models.F('old_sync_state_set_epoch'))), name='ss_epoch_never_decreases')],
                    },
                ),
                migrations.CreateModel(
                    name='Replica',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('broker_id', models.BigIntegerField()),
                        ('broker_address', models.CharField(max_length=255)),
                        ('register_check_code', models.CharField(max_length=300)),
                        ('in_sync_state_set', models.BooleanField(default=False)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('group', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='replicas', to='controller.replicagroup')),
                    ],
                    options={
                        'db_table': 'controlplane_replica',
                        'ordering': ['group_id', 'broker_id'],
                        'constraints': [models.UniqueConstraint(fields=('group', 'broker_id'), name='replica_unique_id_in_group'), models.CheckConstraint(condition=models.Q(('broker_id__gte', 1)), name='replica_controller_id_positive')],
                    },
                ),
            ],
        ),
    ]
