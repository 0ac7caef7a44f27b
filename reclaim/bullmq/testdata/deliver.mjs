// A real BullMQ worker whose processor reports for a Go worker, for the Go
// tests of reclaim/bullmq: BullMQ delivers, the Go test runs the job's
// execution through jobguard and says what the processor tells BullMQ.
//
// usage: node deliver.mjs <bullmq folder> <redis url> <prefix> <queue> <row id> [lock ms]
//
// Adds one "chapter" job with data {"rowId": <row id>} (none for a row id
// of "-") and runs a worker over the queue, whose lock on a job lasts
// <lock ms> (60000 by default) and whose stalled check runs every half of
// it: a worker stopped longer loses the job to another's stalled check. For every delivery the processor prints one JSON line,
//   {"event":"active","id":"1","attemptsMade":0,"bullmq":"6.7.0"}
// and waits for one line on stdin, the verdict:
//   done       returns: BullMQ completes the job;
//   requeued   job.moveToDelayed(Date.now(), token), then throws
//              DelayedError: BullMQ delivers the job again, and counts no
//              attempt (the way a processor answers jobguard.ErrRequeued);
//   permanent  throws UnrecoverableError: BullMQ fails the job for good
//              (the answer to jobguard.IsPermanent);
//   error      throws an Error: BullMQ retries while attempts last.
// When the job ends it prints {"event":"completed"} or
// {"event":"failed","reason":"..."}. It stops on SIGTERM or when stdin
// closes.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const [folder, url, prefix, queueName, rowId, lockMs] = process.argv.slice(2);
const lockDuration = Number(lockMs || 60000);
const dir = resolve(dirname(fileURLToPath(import.meta.url)), folder);
const require = createRequire(join(dir, 'package.json'));
const { Queue, Worker, DelayedError, UnrecoverableError } = require('bullmq');
const { version } = JSON.parse(readFileSync(join(dir, 'node_modules', 'bullmq', 'package.json'), 'utf8'));

const u = new URL(url);
const connection = () => ({
  host: u.hostname,
  port: Number(u.port || 6379),
  db: Number(u.pathname.slice(1) || 0),
  password: u.password || undefined,
  maxRetriesPerRequest: null,
});
const say = (o) => process.stdout.write(JSON.stringify(o) + '\n');

// verdicts hands each stdin line to the delivery waiting for it.
const lines = [];
const waiting = [];
const rl = createInterface({ input: process.stdin });
rl.on('line', (line) => {
  const w = waiting.shift();
  if (w) w(line.trim());
  else lines.push(line.trim());
});
const verdict = () => (lines.length > 0 ? Promise.resolve(lines.shift()) : new Promise((r) => waiting.push(r)));

const queue = new Queue(queueName, { connection: connection(), prefix });
const worker = new Worker(queueName, async (job, token) => {
  say({ event: 'active', id: job.id, attemptsMade: job.attemptsMade, bullmq: version });
  const v = await verdict();
  switch (v) {
    case 'done':
      return 'done';
    case 'requeued':
      await job.moveToDelayed(Date.now(), token);
      throw new DelayedError();
    case 'permanent':
      throw new UnrecoverableError('jobguard: the job is terminal for this execution');
    default:
      throw new Error(v);
  }
}, { connection: connection(), prefix, lockDuration, stalledInterval: Math.max(100, lockDuration / 2) });
worker.on('completed', () => say({ event: 'completed' }));
worker.on('failed', (_job, err) => say({ event: 'failed', reason: err.message }));
worker.on('error', (err) => say({ event: 'error', reason: err.message }));

const shutdown = async () => {
  await worker.close(true);
  await queue.close();
  process.exit(0);
};
process.on('SIGTERM', shutdown);
rl.on('close', shutdown);

await worker.waitUntilReady();
say({ event: 'ready', bullmq: version });
if (rowId !== '-') await queue.add('chapter', { rowId });
