"""The broker's store: commit log segments, consume queues, consumer offsets, crash recovery."""
