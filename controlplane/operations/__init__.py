"""Floor 3: operations that span both siblings (isolate a broker, ...): one use case each, calling the
nameserver's and the controller's services. See docs/architecture.md."""
