// What every Node.js client driver shares (clients/nodejs/client.mjs, clients/remoting-node/client.js):
// the JSON-lines event file the parent reads (chaos/official_client.py EventLog), the client library's
// log in a file of the run's, SIGTERM/SIGINT as a clean stop, and timed waits.
'use strict';

const { appendFileSync, openSync, writeSync } = require('node:fs');
const { format } = require('node:util');

// event(kind, fields): one whole line per write, as the parent reads the file while we write it.
function eventWriter(path) {
  const out = openSync(path, 'a');
  return (kind, fields = {}) => writeSync(out, JSON.stringify({ t: Date.now() / 1000, kind, ...fields }) + '\n');
}

function describe(err) {
  const name = err?.name ?? err?.constructor?.name ?? 'Error';
  return `${name}: ${String(err?.message ?? err).split(/\s+/).join(' ')}`;
}

// A library logger writing to this run's file (nothing without one) instead of the console or ~/logs.
function fileLogger(path) {
  const line = level => (...parts) => {
    if (path) appendFileSync(path, `${new Date().toISOString()} [${level}] ${format(...parts)}\n`);
  };
  return { debug: line('DEBUG'), info: line('INFO'), warn: line('WARN'), error: line('ERROR'), close() {} };
}

// signals.stopping turns true on SIGTERM or SIGINT, and ends the pause under way.
const signals = { stopping: false };
let wake = () => {};
for (const sig of [ 'SIGTERM', 'SIGINT' ]) {
  process.on(sig, () => {
    signals.stopping = true;
    wake();
  });
}

function pause(ms) {
  return new Promise(resolve => {
    const timer = setTimeout(resolve, ms);
    wake = () => {
      clearTimeout(timer);
      resolve();
    };
  });
}

function withTimeout(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} took more than ${ms} ms`)), ms);
  });
  return Promise.race([ promise, timeout ]).finally(() => clearTimeout(timer));
}

module.exports = { eventWriter, describe, fileLogger, signals, pause, withTimeout };
