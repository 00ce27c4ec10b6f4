"""The RocketMQ 5 client endpoint: gRPC ``MessagingService`` (docs/grpc-endpoint-notes.md)."""
