// The official RocketMQ Node.js client (npm rocketmq-client-nodejs, pinned in package.json) as a load
// in a process of its own: a Producer that sends one message at a time, or a SimpleConsumer that
// receives and acks. The Node twin of chaos/official_client.py, with the same JSON-lines events, so
// that chaos/official_client.py's EventLog reads both (chaos/node_client.py starts this script):
//
//   node client.mjs produce --access 127.0.0.1:8081 --topic T --out producer.jsonl
//   node client.mjs consume --access 127.0.0.1:8081 --topic T --group G --out consumer.jsonl
//
// Events (every line has t, seconds since the epoch, and kind):
//   producer  ack {id, sent, msg_id} | fail {id, sent, error} (the client's own retries spent)
//   consumer  delivery {id, msg_id, attempt} | ack_fail {id, error} | receive_fail {error}
//   both      started | start_fail {error} | stopped
// ``id`` is the message body (<prefix><sequence>), ``msg_id`` the client's message id.
//
// The access point must be ONE address: the client joins several with "," into its gRPC target,
// which grpc-js cannot resolve. SIGTERM / SIGINT stop the loop; the client is shut down cleanly.

import { createRequire } from 'node:module';
import { parseArgs } from 'node:util';

const require = createRequire(import.meta.url);
const { Producer, SimpleConsumer } = require('rocketmq-client-nodejs');
const { eventWriter, describe, fileLogger, signals, pause, withTimeout } = require('../common/driver.cjs');

const STARTUP_TIMEOUT_MS = 15000; // startup() waits for the settings reply without a deadline of its own
const STARTUP_RETRY_MS = 500;

const { values: args, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    access: { type: 'string' },
    topic: { type: 'string' },
    group: { type: 'string' },
    out: { type: 'string' },
    'client-log': { type: 'string' },
    'request-timeout-ms': { type: 'string', default: '3000' },
    'interval-ms': { type: 'string', default: '5' },
    'id-prefix': { type: 'string', default: 'm-' },
    batch: { type: 'string', default: '32' },
    'invisible-ms': { type: 'string', default: '30000' },
    'await-ms': { type: 'string', default: '2000' },
    'failure-pause-ms': { type: 'string', default: '50' },
  },
});
const role = positionals[0];
if (!['produce', 'consume'].includes(role) || !args.access || !args.topic || !args.out || (role === 'consume' && !args.group)) {
  process.stderr.write('usage: node client.mjs produce|consume --access HOST:PORT --topic T [--group G] --out FILE\n');
  process.exit(2);
}

const event = eventWriter(args.out);

const common = {
  endpoints: args.access,
  namespace: '',
  requestTimeout: Number(args['request-timeout-ms']),
  logger: fileLogger(args['client-log']),
};

// A new client per attempt: a failed startup() leaves the old one's timers behind, unusable.
async function start(make) {
  while (!signals.stopping) {
    const client = make();
    try {
      await withTimeout(client.startup(), STARTUP_TIMEOUT_MS, 'startup');
      event('started');
      return client;
    } catch (err) {
      event('start_fail', { error: describe(err) });
      await pause(STARTUP_RETRY_MS);
    }
  }
  return null;
}

async function produce() {
  const producer = await start(() => new Producer({ ...common, topics: [ args.topic ] }));
  if (!producer) return;
  let seq = 0;
  while (!signals.stopping) {
    const id = `${args['id-prefix']}${String(seq).padStart(9, '0')}`;
    seq += 1;
    const sent = Date.now() / 1000;
    try {
      const receipt = await producer.send({ topic: args.topic, body: Buffer.from(id) });
      event('ack', { id, sent, msg_id: receipt.messageId });
    } catch (err) { // the client's own retries are spent
      event('fail', { id, sent, error: describe(err) });
    }
    await pause(Number(args['interval-ms']));
  }
  await producer.shutdown();
  event('stopped', { sent: seq });
}

async function consume() {
  const consumer = await start(() => new SimpleConsumer({
    ...common,
    consumerGroup: args.group,
    subscriptions: new Map([[ args.topic, '*' ]]),
    awaitDuration: Number(args['await-ms']),
  }));
  if (!consumer) return;
  let received = 0;
  while (!signals.stopping) {
    let messages;
    try {
      messages = await consumer.receive(Number(args.batch), Number(args['invisible-ms']));
    } catch (err) {
      event('receive_fail', { error: describe(err) });
      await pause(Number(args['failure-pause-ms']));
      continue;
    }
    for (const m of messages) {
      const id = m.body.toString();
      received += 1;
      event('delivery', { id, msg_id: m.messageId, attempt: m.deliveryAttempt ?? null });
      try {
        await consumer.ack(m);
      } catch (err) {
        event('ack_fail', { id, error: describe(err) });
      }
    }
  }
  await consumer.shutdown();
  event('stopped', { received });
}

try {
  await (role === 'produce' ? produce() : consume());
} catch (err) {
  event('crash', { error: describe(err) });
  process.exitCode = 1;
}
// The library keeps interval timers (idle-channel cleanup) even after shutdown: leave at once.
process.exit();
