/**
 * autocannon's `setupClient` for `measure` (support.ts): records each answer's latency as
 * autocannon's client measured it (`process.hrtime`, in fractional milliseconds) and sends
 * the figures, in batches, to the BroadcastChannel named by ATRIUM_BENCH_LATENCY_CHANNEL.
 * autocannon's own latency histogram keeps whole milliseconds only, so a p50 under one
 * reads as 0 and p99 over p50 cannot be read; these figures keep the microseconds.
 *
 * With ATRIUM_BENCH_TOKENS naming a file of access tokens (one a line), each request takes
 * the next token of the file, in turn across the connections, from ATRIUM_BENCH_TOKENS_START
 * on (`measure` carries the position from run to run): a bench of many users, where a token
 * comes round again only after all the others. With ATRIUM_BENCH_BODY (a body holding
 * `{n}`), each request sends that body with `{n}` a value no other request of the bench
 * sends: a write that changes something every time.
 *
 * autocannon loads this file in each of its worker threads (`require`, so CommonJS) and
 * lets a worker end once its run is over; the recorder's timer keeps the worker until its
 * last figures are sent (a second without answers).
 */
'use strict';

const { readFileSync } = require('node:fs');
const { BroadcastChannel } = require('node:worker_threads');

const BATCH = 1024;
const IDLE_MS = 1000;

let channel;
let channelName;
let timer;
let batch = [];
let lastAnswerAt = 0;

function send() {
  if (batch.length === 0) return;
  channel.postMessage(Float64Array.from(batch));
  batch = [];
}

function stop() {
  send();
  channel.close();
  clearInterval(timer);
  channel = channelName = timer = undefined;
}

/** Opens the channel of this run (`measure` names one per run; without workers, runs share this module). */
function useChannelOfThisRun() {
  const name = process.env.ATRIUM_BENCH_LATENCY_CHANNEL;
  if (!name) throw new Error('latency-recorder: ATRIUM_BENCH_LATENCY_CHANNEL is not set');
  lastAnswerAt = Date.now();
  if (name === channelName) return;
  if (channel) stop();
  channel = new BroadcastChannel(name);
  channelName = name;
  timer = setInterval(() => (Date.now() - lastAnswerAt > IDLE_MS ? stop() : send()), 20);
}

let tokensFile;
let tokensRun;
let tokens;
let nextToken = 0;

/** The tokens of this run (ATRIUM_BENCH_TOKENS), or undefined when it sends one token throughout. */
function tokensOfThisRun() {
  const file = process.env.ATRIUM_BENCH_TOKENS;
  if (!file) return undefined;
  if (file !== tokensFile) {
    tokens = readFileSync(file, 'utf8').split('\n').filter(Boolean);
    tokensFile = file;
  }
  // A run goes on where the last one stopped (on this thread, runs without workers share this module).
  if (tokensRun !== channelName) {
    tokensRun = channelName;
    nextToken = Number(process.env.ATRIUM_BENCH_TOKENS_START ?? 0);
  }
  return tokens;
}

let bodies = 0;

module.exports = function recordLatencies(client) {
  useChannelOfThisRun();
  const rotating = tokensOfThisRun();
  const nextTokenHeader = () => ({ authorization: `Bearer ${rotating[nextToken++ % rotating.length]}` });
  // Each connection's first request too takes the next token, not the one the run was started with.
  if (rotating) client.setHeaders(nextTokenHeader());
  const template = process.env.ATRIUM_BENCH_BODY;
  // The run's channel names it apart from every other run; the count, each request of the run.
  const nextBody = () => template.replace(/\{n\}/g, `${channelName.slice(-12)}-${bodies++}`);
  if (template) client.setBody(nextBody());
  client.on('response', (_statusCode, _bytes, responseTime) => {
    batch.push(responseTime);
    lastAnswerAt = Date.now();
    if (batch.length >= BATCH) send();
    if (rotating) client.setHeaders(nextTokenHeader());
    if (template) client.setBody(nextBody());
  });
};
