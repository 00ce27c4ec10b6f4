"""The broker's remoting edge: RocketMQ's classic TCP protocol on listenPort (docs/remoting.md)."""
