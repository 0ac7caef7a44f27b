// A real BullMQ producer and worker for the Go tests of reclaim/bullmq.
//
// usage: node hold.mjs <bullmq folder> <redis url> <prefix> <queue> <n> [churn]
//
// <bullmq folder> is one of the bullmq<major> folders beside this script,
// installed by install.mjs: the worker runs the BullMQ (and ioredis) of that
// folder, so one script drives every major the tests cover.
//
// <redis url> is redis://host:port/db for one server, or
// redis-cluster://host:port[,host:port...] for a Redis Cluster, whose other
// nodes are found from these (the prefix must then carry a hash tag, such as
// "{bull}", as BullMQ requires on a Cluster).
//
// Default mode: adds one job that finishes at once and n "chapter" jobs
// (data {"rowId": "row-<i>"}) that the worker keeps active until the process
// is stopped. Once all n are active and the quick one has completed it
// prints one JSON line:
//   {"bullmq":"6.7.0","held":[{"id":"2","name":"chapter","processedOn":1700000000000,"rowId":"row-0"}, ...],
//    "finished":["1"]}
//
// churn mode: keeps feeding jobs with removeOnComplete, which a worker of
// concurrency n takes through the active list as fast as it can, so that
// jobs keep leaving the list (and their hashes disappear) while the Go test
// reads it. Prints {"bullmq":"6.7.0","held":[],"finished":[]} once the
// first job completed.
//
// Either mode stops on SIGTERM or when stdin closes.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const [folder, url, prefix, queueName, count, mode] = process.argv.slice(2);
// An import resolves from this file's folder; require, made for the chosen
// folder, resolves from there.
const dir = resolve(dirname(fileURLToPath(import.meta.url)), folder);
const require = createRequire(join(dir, 'package.json'));
const { Queue, Worker } = require('bullmq');
const { Cluster } = require('ioredis');
// The version that runs, reported so that a test can tell it ran the major it
// meant to.
const { version } = JSON.parse(readFileSync(join(dir, 'node_modules', 'bullmq', 'package.json'), 'utf8'));
const clusterScheme = 'redis-cluster://';

// connection returns what a Queue or a Worker connects with: options from
// which BullMQ makes its own clients, or, on a Cluster, a client of its own
// for each (BullMQ takes a Cluster only as a client).
function connection() {
  if (url.startsWith(clusterScheme)) {
    const nodes = url.slice(clusterScheme.length).split(',').map((hostPort) => {
      const at = hostPort.lastIndexOf(':');
      return { host: hostPort.slice(0, at), port: Number(hostPort.slice(at + 1)) };
    });
    return new Cluster(nodes, { redisOptions: { maxRetriesPerRequest: null } });
  }
  const u = new URL(url);
  return {
    host: u.hostname,
    port: Number(u.port || 6379),
    db: Number(u.pathname.slice(1) || 0),
    password: u.password || undefined,
    maxRetriesPerRequest: null,
  };
}

const n = Number(count);
const queue = new Queue(queueName, { connection: connection(), prefix });
const cleanups = [];

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function hold() {
  let release;
  const stop = new Promise((resolve) => { release = resolve; });
  cleanups.push(release);
  const held = [];
  const quick = await queue.add('quick', { rowId: 'quick' });
  for (let i = 0; i < n; i++) {
    await queue.add('chapter', { rowId: `row-${i}` });
  }
  const worker = new Worker(queueName, async (job) => {
    if (job.name === 'quick') return 'done';
    held.push({ id: job.id, name: job.name, processedOn: job.processedOn, rowId: job.data.rowId });
    if (held.length === n) {
      while ((await queue.getJobState(quick.id)) !== 'completed') await sleep(5);
      process.stdout.write(JSON.stringify({ bullmq: version, held, finished: [quick.id] }) + '\n');
    }
    await stop;
  }, { connection: connection(), prefix, concurrency: n + 1, lockDuration: 60000 });
  cleanups.push(() => worker.close(true));
}

async function churn() {
  let i = 0;
  const feed = async () => {
    const batch = [];
    for (let k = 0; k < 50; k++, i++) {
      batch.push({ name: 'chapter', data: { rowId: `row-${i}` }, opts: { removeOnComplete: true } });
    }
    await queue.addBulk(batch);
  };
  await feed();
  const timer = setInterval(() => { feed().catch(() => {}); }, 20);
  cleanups.push(() => clearInterval(timer));
  const worker = new Worker(queueName, async () => { await sleep(1); }, { connection: connection(), prefix, concurrency: n });
  cleanups.push(() => worker.close(true));
  await new Promise((r) => worker.once('completed', r));
  process.stdout.write(JSON.stringify({ bullmq: version, held: [], finished: [] }) + '\n');
}

const shutdown = async () => {
  for (const c of cleanups) await c();
  await queue.close();
  process.exit(0);
};
process.on('SIGTERM', shutdown);
process.stdin.on('end', shutdown);
process.stdin.resume();

await (mode === 'churn' ? churn() : hold());
