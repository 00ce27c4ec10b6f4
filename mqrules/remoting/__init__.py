"""RocketMQ's classic remoting protocol (issue 36), protocol level only: frames and their two header
serializations (``frame``), cutting a stream into frames (``decoder``), request and response codes
(``codes``), custom-header tables (``headers``), offset message ids (``message_id``) and the properties
string (``properties``). Pure (floor 0): the standard library only. The nameserver's endpoint and the
brokers' both build on it; sockets, timeouts and what a request means live in those endpoints.
"""
