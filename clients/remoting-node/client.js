// ali-ons (npm, pinned in package.json), a pure-JavaScript RocketMQ *remoting* client, as a load in a
// process of its own: a Producer that sends one message at a time, or a push Consumer. It finds brokers
// through a nameserver's remoting endpoint (--namesrv) and writes the same JSON-lines events as
// chaos/official_client.py, so that its EventLog reads them back (chaos/remoting_clients.py starts it):
//
//   node client.js produce --namesrv 127.0.0.1:9876 --topic T --out producer.jsonl [--count N]
//   node client.js consume --namesrv 127.0.0.1:9876 --topic T --group G --out consumer.jsonl
//
// Events (every line has t, seconds since the epoch, and kind):
//   producer  ack {id, sent, msg_id, offset} (SEND_OK) | fail {id, sent, error, code} (thrown once the
//             client's own retries are spent, or another send status, which ``error`` names)
//   consumer  delivery {id, msg_id, attempt, queue_id, queue_offset, tags}
//             route_fail {error, code} (its route poll found no route: code 17 TOPIC_NOT_EXIST)
//   both      started | start_fail {error} | client_error {error, code} | stopped | crash {error}
// ``id`` is <prefix><sequence>: the user property HA_ID and the start of the body (padded with "." to
// --body-bytes); ``msg_id`` is the client's message id (the broker's offset message id from
// SEND_MESSAGE_V2's reply; on delivery, the one decoded from the store host and commit-log offset).
//
// ali-ons has no orderly consumer (it never sends LOCK_BATCH_MQ); --orderly-key sets the message's
// sharding key, which picks one queue by the key's MD5. It always signs requests (AccessKey, OnsChannel,
// Signature extFields) with the keys given here: --access-key / --secret-key (a user of the cluster's
// access control, docs/acl.md), else dummy ones, which a broker without ACL ignores.
// SIGTERM / SIGINT stop the loop; the client is closed, then ``stopped`` is written.

'use strict';

const { parseArgs } = require('node:util');
const { Consumer, Message, Producer } = require('ali-ons');
const { eventWriter, describe, fileLogger, signals, pause, withTimeout } = require('../common/driver.cjs');

const ID_PROPERTY = 'HA_ID';
const PAD = '.';
const STARTUP_TIMEOUT_MS = 15000;
const DUMMY_KEYS = { accessKeyId: 'remoting-test', accessKeySecret: 'remoting-test' };

const { values: args, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    namesrv: { type: 'string' },
    topic: { type: 'string' },
    group: { type: 'string' },
    out: { type: 'string' },
    tags: { type: 'string', default: '' },
    'client-log': { type: 'string' },
    count: { type: 'string', default: '0' },
    'interval-ms': { type: 'string', default: '5' },
    'id-prefix': { type: 'string', default: 'm-' },
    'body-bytes': { type: 'string', default: '0' },
    'delay-level': { type: 'string', default: '0' },
    'orderly-key': { type: 'string' },
    'timeout-ms': { type: 'string', default: '3000' },
    orderly: { type: 'boolean', default: false },
    'access-key': { type: 'string' },
    'secret-key': { type: 'string' },
  },
});
const role = positionals[0];
if (!['produce', 'consume'].includes(role) || !args.namesrv || !args.topic || !args.out || (role === 'consume' && !args.group)) {
  process.stderr.write('usage: node client.js produce|consume --namesrv HOST:PORT --topic T [--group G] --out FILE\n');
  process.exit(2);
}
if (args.orderly) {
  process.stderr.write('ali-ons has no orderly consumer: use the C++ client (clients/remoting-py) for orderly consumption\n');
  process.exit(2);
}

const event = eventWriter(args.out);

const common = {
  // --access-key / --secret-key: a user of the cluster's access control (docs/acl.md); else dummy keys
  ...(args['access-key'] ? { accessKeyId: args['access-key'], accessKeySecret: args['secret-key'] ?? '' } : DUMMY_KEYS),
  nameSrv: args.namesrv.split(';'),
  // required by the constructor, used only to look nameservers up over HTTP (not with nameSrv)
  httpclient: { request: async () => { throw new Error('no HTTP nameserver lookup: nameSrv is given'); } },
  logger: fileLogger(args['client-log']),
};

const TOPIC_NOT_EXIST = 17; // ResponseCode: the nameserver has no route for the topic

// ali-ons reports what its timers hit (route polls, offset reads) as 'error' events, with the
// response code when a server answered one.
function onClientError(err) {
  event(err?.code === TOPIC_NOT_EXIST ? 'route_fail' : 'client_error', { error: describe(err), code: err?.code ?? null });
}

async function start(client) {
  client.on('error', onClientError);
  try {
    await withTimeout(client.ready(), STARTUP_TIMEOUT_MS, 'ready');
  } catch (err) {
    event('start_fail', { error: describe(err) });
    return false;
  }
  event('started');
  return true;
}

// close() unregisters from every broker and throws what one answered: the client is closed anyway.
async function close(client) {
  try {
    await client.close();
  } catch (err) {
    event('client_error', { error: describe(err), code: err?.code ?? null });
  }
}

function bodyOf(id) {
  return Buffer.from(id.padEnd(Number(args['body-bytes']), PAD));
}

function idOf(msg) {
  return msg.properties?.[ID_PROPERTY] || msg.body.toString().split(PAD, 1)[0];
}

async function produce() {
  const producer = new Producer({ ...common, producerGroup: args.group || 'remoting-node-producer', sendMsgTimeout: Number(args['timeout-ms']) });
  if (!await start(producer)) return;
  const count = Number(args.count);
  let seq = 0;
  while (!signals.stopping && (count === 0 || seq < count)) {
    const id = `${args['id-prefix']}${String(seq).padStart(9, '0')}`;
    seq += 1;
    const msg = new Message(args.topic, args.tags, bodyOf(id));
    if (!args.tags) delete msg.properties.TAGS; // ali-ons would send the tag "null"
    msg.properties[ID_PROPERTY] = id;
    msg.keys = [ id ];
    if (Number(args['delay-level'])) msg.delayTimeLevel = Number(args['delay-level']);
    if (args['orderly-key'] !== undefined) msg.shardingKey = args['orderly-key'];
    const sent = Date.now() / 1000;
    try {
      const result = await producer.send(msg);
      if (result.sendStatus === 'SEND_OK') {
        event('ack', { id, sent, msg_id: result.msgId, offset: result.queueOffset });
      } else {
        event('fail', { id, sent, error: `send status ${result.sendStatus}`, msg_id: result.msgId });
      }
    } catch (err) { // the client's own retries are spent
      event('fail', { id, sent, error: describe(err), code: err?.code ?? null });
    }
    if (Number(args['interval-ms'])) await pause(Number(args['interval-ms']));
  }
  while (!signals.stopping) await pause(60000); // --count reached: stay until told, as the C++ driver does
  await close(producer);
  event('stopped', { sent: seq });
}

async function consume() {
  const consumer = new Consumer({ ...common, consumerGroup: args.group });
  let received = 0;
  consumer.subscribe(args.topic, args.tags || '*', async msg => {
    received += 1;
    event('delivery', {
      id: idOf(msg),
      msg_id: msg.msgId,
      attempt: msg.reconsumeTimes + 1,
      queue_id: msg.queueId,
      queue_offset: Number(msg.queueOffset),
      tags: msg.tags ?? '',
    });
  });
  if (!await start(consumer)) return;
  while (!signals.stopping) await pause(60000);
  await close(consumer);
  event('stopped', { received });
}

(async () => {
  try {
    await (role === 'produce' ? produce() : consume());
  } catch (err) {
    event('crash', { error: describe(err) });
    process.exitCode = 1;
  }
  // the library keeps timers (route polls, heartbeats) after close: leave at once
  process.exit();
})();
