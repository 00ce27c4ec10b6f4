from django.apps import AppConfig


class NameserverConfig(AppConfig):
    name = "nameserver"
    verbose_name = "Nameserver"
