"""Name and address rules shared by the nameserver's and the controller's APIs."""

import re

# TopicValidator's character set; '/' is excluded everywhere because liveness keys use it.
NAME_RE = re.compile(r"^[%|a-zA-Z0-9_.-]+$")
ADDR_RE = re.compile(r"^[A-Za-z0-9_.\-\[\]:]+:\d{1,5}$")
# '%%' because Django formats validator messages with %-interpolation.
NAME_MESSAGE = "only letters, digits and %%|_.- are allowed"


def name_field(**kw):
    """A cluster, broker set, topic or group name (at most 127 characters)."""
    from rest_framework import serializers

    return serializers.RegexField(NAME_RE, max_length=127, error_messages={"invalid": NAME_MESSAGE}, **kw)


def addr_field(**kw):
    """A ``host:port`` address."""
    from rest_framework import serializers

    return serializers.RegexField(ADDR_RE, max_length=255, error_messages={"invalid": "must be host:port"}, **kw)
