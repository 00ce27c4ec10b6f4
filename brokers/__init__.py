"""The broker: a standalone asyncio program that never imports Django (ARCHITECTURE §2)."""
