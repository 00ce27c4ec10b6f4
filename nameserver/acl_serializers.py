"""What the ACL REST API takes and answers (nameserver/acl_views.py), with the schema that says so.
Policy entries are checked by ``mqrules.acl.parse_entries`` (taken whole or refused, with a problem per
field: ``entries[0].actions``); here only their JSON shape is checked first (lists are lists)."""

from __future__ import annotations

import re

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from controlplane.validation_drf import RuledSerializer, boolean_field, name_field, pattern_field, text_field
from mqrules import acl as rules
from mqrules import validation as v

USER_TYPES = [t.value for t in rules.UserType]
USER_STATUSES = [s.value for s in rules.UserStatus]
ACTIONS = [a.value for a in rules.Action if a is not rules.Action.ANY]  # Any is what a request asks
DECISIONS = [d.value for d in rules.Decision]

# A secret key: printable ASCII without spaces (clients sign with it, and type it).
PASSWORD_PATTERN = rf"^[!-~]{{1,{rules.MAX_SECRET}}}$"
_password_check = v.matching(PASSWORD_PATTERN, "1 to 255 printable ASCII characters without spaces", rules.MAX_SECRET)
SUBJECT_PATTERN = rf"^(User:)?{v.NAME_PATTERN[1:-1]}$"
_subject_check = v.matching(SUBJECT_PATTERN, "User:<username> or a username", v.NAME_MAX_LENGTH + 5)
# Resource.parse's rule, as the schema can state it: a name of printable ASCII but space, ':', ',' and '*'.
_NAME = r"[!-)+\--9;-~]"
RESOURCE_PATTERN = (
    rf"^(\*|(Cluster|Namespace|Topic|Group):(\*|{_NAME}{{1,{rules.MAX_NAME}}}|{_NAME}{{1,{rules.MAX_NAME - 1}}}\*))$"
)
_OCTET = r"(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
# IPv4 exactly; IPv6 loosely (rules.check_source_ip decides: createAcl may refuse what looks like one).
SOURCE_IP_PATTERN = rf"^({_OCTET}(\.{_OCTET}){{3}}(/(3[0-2]|[12]?[0-9]))?|[0-9A-Fa-f.]*:[0-9A-Fa-f:.]*(/[0-9]{{1,3}})?)$"

_strings = {"type": "array", "minItems": 1, "maxItems": rules.MAX_ITEMS}
ENTRY_SCHEMA = {
    "type": "object",
    "description": "mqadmin createAcl's -r, -a, -d, -i: one entry per resource once taken",
    "properties": {
        "resources": {**_strings, "items": {"type": "string", "pattern": RESOURCE_PATTERN}},
        "resource": {"type": "string", "pattern": RESOURCE_PATTERN, "description": "one resource (as answers give it)"},
        "actions": {**_strings, "items": {"type": "string", "enum": ACTIONS}},
        "decision": {"type": "string", "enum": DECISIONS, "default": "Allow"},
        "sourceIps": {
            "type": "array",
            "maxItems": rules.MAX_ITEMS,
            "items": {"type": "string", "pattern": SOURCE_IP_PATTERN},
            "description": "addresses or CIDR ranges; empty or absent: from anywhere",
        },
    },
    "required": ["actions"],
    "anyOf": [{"required": ["resources"]}, {"required": ["resource"]}],
}
# What the REST API takes is what its schema says, exactly (rmqha sends lists; parse_entries also takes
# mqadmin's comma-separated strings and any case): each field's JSON type, then its values' form.
_FORMS = {
    "resources": re.compile(RESOURCE_PATTERN).fullmatch,
    "resource": re.compile(RESOURCE_PATTERN).fullmatch,
    "actions": set(ACTIONS).__contains__,
    "decision": set(DECISIONS).__contains__,
    "sourceIps": re.compile(SOURCE_IP_PATTERN).fullmatch,
}
_FORM_MESSAGES = {
    "resources": "a resource is Type:name, Type:prefix*, Type:* or * (Type: Cluster, Namespace, Topic, Group)",
    "resource": "a resource is Type:name, Type:prefix*, Type:* or * (Type: Cluster, Namespace, Topic, Group)",
    "actions": "actions are " + ", ".join(ACTIONS),
    "decision": "the decision is Allow or Deny",
    "sourceIps": "a source IP is an address or a CIDR range (10.0.0.0/8)",
}
_LISTS = ("resources", "actions", "sourceIps")
_resource_check = v.matching(RESOURCE_PATTERN, _FORM_MESSAGES["resource"], rules.MAX_NAME + 10)


@extend_schema_field({"type": "array", "minItems": 1, "maxItems": rules.MAX_ENTRIES, "items": ENTRY_SCHEMA})
class EntriesField(serializers.Field):
    """The raw entries; the serializer's ``validate`` checks them whole (``checked_entries``)."""

    def to_internal_value(self, data):
        return data

    def to_representation(self, value):
        return value


def _shape_problems(raw: object) -> dict[str, list[str]]:
    """What parse_entries would take but the schema does not state (``_FORMS``), by field."""
    problems: dict[str, list[str]] = {}
    if not isinstance(raw, list):
        return problems
    for i, item in enumerate(raw[: rules.MAX_ENTRIES]):
        if not isinstance(item, dict):
            continue
        for key, fits in _FORMS.items():
            if key not in item:
                continue
            value, where = item[key], f"entries[{i}].{key}"
            if key in _LISTS and not (isinstance(value, list) and all(isinstance(x, str) for x in value)):
                problems.setdefault(where, []).append("a list of strings")
            elif key not in _LISTS and not isinstance(value, str):
                problems.setdefault(where, []).append("a string")
            elif not all(fits(x) for x in (value if key in _LISTS else [value])):
                problems.setdefault(where, []).append(_FORM_MESSAGES[key])
    return problems


def checked_entries(raw: object) -> list[rules.PolicyEntry]:
    problems = _shape_problems(raw)
    if not problems:
        entries, problems = rules.parse_entries(raw)
    if problems:
        raise serializers.ValidationError(problems)
    return entries


def _dry_run():
    return boolean_field(default=False, help_text="true: answer what the change would do (lockouts), change nothing")


class UserCreateSerializer(serializers.Serializer):
    username = name_field(help_text="the access key clients sign with")
    password = pattern_field(
        _password_check, PASSWORD_PATTERN, rules.MAX_SECRET, required=False, help_text="the secret key; absent: one is generated"
    )
    userType = serializers.ChoiceField(choices=USER_TYPES, default="Normal")
    userStatus = serializers.ChoiceField(choices=USER_STATUSES, default="enable")
    dryRun = _dry_run()


class UserUpdateSerializer(RuledSerializer):
    """updateUser: what changes (at least one of password, userType, userStatus)."""

    json_schema_rule = {
        "minProperties": 1,  # a PATCH body's schema keeps no "required": this marks the body required
        "anyOf": [{"required": ["password"]}, {"required": ["userType"]}, {"required": ["userStatus"]}],
    }
    password = pattern_field(_password_check, PASSWORD_PATTERN, rules.MAX_SECRET, required=False, help_text="a new secret key")
    userType = serializers.ChoiceField(choices=USER_TYPES, required=False)
    userStatus = serializers.ChoiceField(choices=USER_STATUSES, required=False)
    dryRun = _dry_run()

    def validate(self, attrs):
        if not any(k in attrs for k in ("password", "userType", "userStatus")):
            raise serializers.ValidationError({"non_field_errors": ["give password, userType or userStatus"]})
        return attrs


class AclCreateSerializer(serializers.Serializer):
    subject = pattern_field(_subject_check, SUBJECT_PATTERN, v.NAME_MAX_LENGTH + 5, help_text="User:<username> or a username")
    entries = EntriesField()
    dryRun = _dry_run()

    def validate(self, attrs):
        return {**attrs, "entries": checked_entries(attrs["entries"])}


class AclUpdateSerializer(RuledSerializer):
    """updateAcl: the entries to replace (same resource) or add."""

    json_schema_rule = {"required": ["entries"]}  # a PATCH body's schema keeps no "required" of its own
    entries = EntriesField()
    dryRun = _dry_run()

    def validate(self, attrs):
        return {**attrs, "entries": checked_entries(attrs["entries"])}


class DryRunSerializer(serializers.Serializer):
    dryRun = _dry_run()


class AclDeleteSerializer(serializers.Serializer):
    resources = serializers.ListField(
        child=pattern_field(_resource_check, RESOURCE_PATTERN, rules.MAX_NAME + 10),
        required=False,
        min_length=1,
        max_length=rules.MAX_ITEMS,
        help_text="deleteAcl -r: only these resources' entries; absent: the whole policy",
    )
    dryRun = _dry_run()


class UserListQuerySerializer(serializers.Serializer):
    filter = text_field(v.NAME_MAX_LENGTH, required=False, default="", help_text="usernames containing it")


class AclListQuerySerializer(serializers.Serializer):
    subject = text_field(v.NAME_MAX_LENGTH + 5, required=False, default="", help_text="subjects containing it")
    resource = text_field(rules.MAX_NAME + 10, required=False, default="", help_text="resources containing it")

    def validate_subject(self, value):
        return value.removeprefix("User:")


# --- answers ---------------------------------------------------------------------------------------------


class UserAnswer(serializers.Serializer):
    username = serializers.CharField()
    userType = serializers.ChoiceField(choices=USER_TYPES)
    userStatus = serializers.ChoiceField(choices=USER_STATUSES)
    createdAt = serializers.DateTimeField(required=False)
    updatedAt = serializers.DateTimeField(required=False)


class LockoutAnswer(serializers.Serializer):
    username = serializers.CharField()
    resource = serializers.CharField(help_text="Topic:NAME or Group:NAME")
    action = serializers.CharField(help_text="Pub or Sub")
    reason = serializers.CharField()


class EntryAnswer(serializers.Serializer):
    resource = serializers.CharField()
    actions = serializers.ListField(child=serializers.CharField())
    decision = serializers.ChoiceField(choices=DECISIONS)
    sourceIps = serializers.ListField(child=serializers.CharField())


class PolicyAnswer(serializers.Serializer):
    subject = serializers.CharField(help_text="User:<username>")
    username = serializers.CharField()
    entries = EntryAnswer(many=True)


class _ChangeAnswer(serializers.Serializer):
    applied = serializers.BooleanField(help_text="false: a dry run, nothing changed")
    version = serializers.IntegerField(help_text="the cluster's ACL version after the change")
    lockouts = LockoutAnswer(many=True, help_text="what users could do before and could not after, on known topics and groups")


class DeletedAnswer(_ChangeAnswer):
    pass


class UserChangeAnswer(_ChangeAnswer):
    user = UserAnswer(required=False, help_text="applied: the user as it is now")
    password = serializers.CharField(required=False, help_text="createUser, applied: the secret key, shown this once")


class PolicyChangeAnswer(_ChangeAnswer):
    policy = PolicyAnswer(required=False, allow_null=True, help_text="applied: the policy after the change; null: none left")


class UserListAnswer(serializers.Serializer):
    version = serializers.IntegerField()
    users = UserAnswer(many=True)


class PolicyListAnswer(serializers.Serializer):
    version = serializers.IntegerField()
    policies = PolicyAnswer(many=True)
