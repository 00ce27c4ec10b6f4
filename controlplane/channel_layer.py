"""The Channels layer: channels-redis's, with one round trip per send instead of four.

channels-redis's ``send`` drops expired messages, counts the channel against its capacity, adds the
message and renews the key's expiry as four Redis commands, each awaited in turn. Every push to a
broker (a role change after an election, a request of ``controlplane.broker_rpc``: a message lookup
waits for two of them) paid four round trips; this ``send`` runs the same four commands as one Lua
script, with the same keys, scores and serialized message, so receivers (channels-redis's own
``receive``) see no difference. Group sends and everything else are channels-redis's.
"""

from __future__ import annotations

import time

from channels.exceptions import ChannelFull
from channels_redis.core import RedisChannelLayer

# KEYS: the channel's key. ARGV: expired-before (s), capacity, score (the time, s), message, expiry (s).
_SEND = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, ARGV[1])
if redis.call('ZCOUNT', KEYS[1], '-inf', '+inf') >= tonumber(ARGV[2]) then
  return 0
end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[4])
redis.call('EXPIRE', KEYS[1], ARGV[5])
return 1
"""


class OneTripRedisChannelLayer(RedisChannelLayer):
    async def send(self, channel: str, message: dict) -> None:
        assert isinstance(message, dict), "message is not a dict"
        assert self.require_valid_channel_name(channel), "Channel name not valid"
        assert "__asgi_channel__" not in message
        name = channel
        if "!" in channel:  # a process-local channel: the full name travels in the message
            message = {**message, "__asgi_channel__": channel}
            name = self.non_local_name(channel)
        index = self.consistent_hash(channel) if "!" in channel else next(self._send_index_generator)
        now = time.time()
        sent = await self.connection(index).eval(
            _SEND,
            1,
            self.prefix + name,
            int(now) - int(self.expiry),
            self.get_capacity(channel),
            repr(now),
            self.serialize(message),
            int(self.expiry),
        )
        if not sent:
            raise ChannelFull()
