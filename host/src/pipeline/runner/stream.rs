//! The data path of a round: poll the source, batch records per task, run batches on the
//! tasks' worker threads (which send the output), and bring every task back.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use rdkafka::error::RDKafkaErrorCode;
use rdkafka::message::{BorrowedMessage, Message};

use super::Runner;
use crate::error::PipelineError;
use crate::kafka::record_headers;
use crate::pipeline::output::{Input, Out};
use crate::pipeline::task::Task;
use crate::record::{Fields, RecordBatch};
use crate::table::Tables;
use crate::wasm::ResourcePool;

/// How long one poll waits for the first record.
const POLL_TIMEOUT: Duration = Duration::from_millis(100);
/// Batches per worker thread the runner may hold polled and not yet processed
/// ([`Runner::stream`]): enough to read past the records of one partition that librdkafka hands
/// out together (one fetch's worth: a few thousand flights with the default
/// `max.partition.fetch.bytes`) to other partitions' records, for the other workers.
const READ_AHEAD_BATCHES: usize = 16;
/// Memory of the records polled and not yet processed that a pipeline may always hold, whatever
/// its tenant's pool has left ([`Flow::may_read`]): enough for batches of a few thousand flights
/// where one record at a time would cost a guest call each, and little beside a pool.
const READ_FLOOR: usize = 1 << 20;
/// The smallest `memory_limit_mb` of a pipeline's operators divided by this is the most memory a
/// batch of records polled may hold ([`BatchLimit`]): a guest holds a batch's records as it is
/// given them, and its output besides, so a batch of `source.batch_size` large records could
/// fail every call for want of memory, however often it is retried.
const GUEST_BATCH_SHARE: usize = 4;
/// How long the runner waits for a task to come back after a poll found the consumer's queue
/// dry while tasks are out, before it polls again ([`Runner::stream`]).
const DRY_POLL_WAIT: Duration = Duration::from_millis(1);
/// Longest stretch the runner streams records to the workers before it has every task back,
/// for rebalances, timers and checkpoints ([`Runner::stream`]).
const STREAM_WINDOW: Duration = Duration::from_millis(200);
/// Shortest such stretch, even when a checkpoint is due.
const MIN_STREAM_WINDOW: Duration = Duration::from_millis(10);

impl Runner<'_> {
    /// Index of the task of `topic`'s `partition`, if one is assigned.
    pub(super) fn index_of(&self, topic: &str, partition: i32) -> Option<usize> {
        self.task_index.get(topic)?.get(&partition).copied()
    }

    /// Index of the task owning `message`'s partition; `last` remembers the last answer.
    fn task_of(&self, message: &BorrowedMessage<'_>, last: &mut LastTask) -> Result<usize, PipelineError> {
        let (topic, partition) = (message.topic(), message.partition());
        if let Some(index) = last.index.filter(|_| last.partition == partition && last.topic == topic) {
            return Ok(index);
        }
        let index = self.index_of(topic, partition).ok_or_else(|| {
            PipelineError::Bug(format!("a record of {topic}[{partition}] arrived, which no task owns"))
        })?;
        last.topic.clear();
        last.topic.push_str(topic);
        (last.partition, last.index) = (partition, Some(index));
        Ok(index)
    }

    /// Polls the source and runs what arrives through the tasks, each on its worker thread
    /// (which also sends the task's output to the epoch's slot), until a poll comes back empty
    /// with every task back (caught up) or with a rebalance event, [`STREAM_WINDOW`] or the
    /// checkpoint interval has passed, a stop is asked or a task failed; returns once every
    /// task is back.
    ///
    /// A task goes to its worker as soon as a batch of it is full while the poll goes on, so the
    /// workers run apart: librdkafka hands out a partition's fetched records together, so a
    /// stretch of the input often feeds one or two tasks, and workers that waited for each
    /// other's rounds took turns. A task has one job out at a time, so its batches run in poll
    /// order (what arrives meanwhile waits for it); a task's output, and its order, do not
    /// depend on the number of workers. At most [`READ_AHEAD_BATCHES`] × `batch_size` × workers
    /// records are out at once, which bounds both the memory they hold and how long the tasks
    /// take to come back once the poll is over. Under a tenant's pool they are its memory too:
    /// the runner polls only while the pool lets it ([`ResourcePool::may_read`]). A batch is
    /// full at `batch_size` records or at what its guests' memory can take ([`BatchLimit`]).
    pub(super) fn stream(&mut self, shutdown: &AtomicBool) -> Result<(), PipelineError> {
        let pool = self.options.pool.clone();
        let guest = self.config.transforms.iter().map(|t| t.memory_limit_bytes).min().unwrap_or(usize::MAX);
        let limit = BatchLimit {
            records: self.config.source.batch_size,
            bytes: (guest / GUEST_BATCH_SHARE).min(pool.as_ref().map_or(usize::MAX, |pool| pool.read_batch_bytes())),
        };
        let (batch_size, most) = (limit.records, READ_AHEAD_BATCHES * limit.records * self.workers.len());
        // Up to the checkpoint that is due, but long enough to take what the consumer holds.
        let until = Instant::now()
            + STREAM_WINDOW
                .min(self.config.checkpoint.interval.saturating_sub(self.coordinator.epoch().started.elapsed()))
                .max(MIN_STREAM_WINDOW);
        let out = self.out();
        let mut flow = Flow::new(std::mem::take(&mut self.tasks), pool);
        let (done_tx, done) = mpsc::channel::<Finished>();
        let (mut polling, mut polls) = (true, 0usize);
        let mut timeout = POLL_TIMEOUT;
        // A task that came back while the runner waited for one, at the end of the last pass.
        let mut settled = false;
        let mut last = LastTask::default();
        loop {
            let (mut returned, mut dry) = (std::mem::take(&mut settled), false);
            while let Ok(finished) = done.try_recv() {
                flow.settle(finished);
                returned = true;
            }
            if polling && flow.failed.is_none() && flow.out_records < most && flow.may_read() {
                // Only a poll that may wait is timed: the rest take what the consumer holds.
                let waiting = (!timeout.is_zero()).then(Instant::now);
                let polled = self.source.consumer().poll(timeout);
                if let Some(started) = waiting {
                    self.metrics.poll_wait(started.elapsed());
                }
                timeout = Duration::ZERO;
                // The clock is read once per batch's worth of polls, not per record, and at
                // every empty poll.
                polls += 1;
                dry = polled.is_none();
                // So is the tenant's memory: the epoch ends early when its state would not fit.
                // And after a task came back: a runner the pool lets read little polls seldom.
                let on_time =
                    (!dry && !returned && polls % batch_size != 0) || (Instant::now() < until && !self.pool_is_short());
                // The queue running dry (fetches in flight) ends the stretch only once every
                // task is back: ending it at once had the runner wait for all the workers before
                // its next poll, so a worker that was done sat idle. A rebalance event also
                // comes back as an empty poll, and ends it.
                let streaming = !dry || (flow.away > 0 && !self.source.rebalance_pending());
                polling = streaming && on_time && !shutdown.load(Ordering::Relaxed);
                // Every broker connection down (one lost connection alone is no outage):
                // readiness reports the broker unreachable until the metrics sampler reaches the
                // cluster again.
                if let Some(Err(error)) = &polled
                    && error.rdkafka_error_code() == Some(RDKafkaErrorCode::AllBrokersDown)
                {
                    self.metrics.broker_unreachable(error);
                }
                match polled {
                    Some(Ok(message)) => match self.task_of(&message, &mut last) {
                        Ok(index) => {
                            let batches = &mut flow.waiting[index];
                            if batches.last().is_none_or(|batch| limit.full(batch)) {
                                batches.push(RecordBatch::default());
                            }
                            let batch = batches.last_mut().expect("a batch was pushed");
                            let before = batch.memory();
                            push_message(batch, &message, &self.tables);
                            let full = limit.full(batch) && flow.home[index].is_some();
                            let grown = batch.memory() - before;
                            flow.hold(grown);
                            if polling && !full && !returned {
                                continue;
                            }
                        }
                        Err(error) => flow.failed = Some(error),
                    },
                    // librdkafka recovers from transient errors itself; any other ends the run
                    // ([`crate::failure::keeps_polling`] says which, and why).
                    Some(Err(error)) if crate::failure::keeps_polling(&error) => {
                        // librdkafka retries; the consumer's context logged the error (once per
                        // kind and interval: a broker outage raises one per poll).
                    }
                    Some(Err(error)) => {
                        // Named in full: a refusal may be of any of them.
                        let operation = format!(
                            "reading the source topics {} as consumer group {}",
                            self.config.source.topics.join(", "),
                            self.source.group_id()
                        );
                        flow.failed = Some(PipelineError::kafka(operation)(error));
                    }
                    None => {}
                }
            }
            // Each task at home takes what waits for it: at once when a batch is full, the
            // rest once the poll is over, the queue is dry or too much is out.
            let flush = !polling || dry || flow.out_records >= most || !flow.may_read();
            for index in 0..flow.home.len() {
                let Some(batches) = flow.ready(index, flush, limit) else { continue };
                let mut task = flow.home[index].take().expect("a ready task is home");
                let given = Given {
                    records: batches.iter().map(RecordBatch::len).sum(),
                    bytes: batches.iter().map(RecordBatch::memory).sum(),
                };
                let (done_tx, out) = (done_tx.clone(), out.clone());
                self.workers.spawn(self.lanes[task.id()], move || {
                    let result = run_batches(&mut task, batches, &out);
                    // The receiver outlives the job: a failed send means the runner is gone.
                    let _ = done_tx.send((index, task, given, result));
                });
                flow.away += 1;
            }
            if flow.away == 0 && (!polling || flow.failed.is_some()) {
                break;
            }
            if flow.away > 0 && polling && dry && flow.failed.is_none() {
                // Poll again soon, or as soon as a task is back.
                if let Some(finished) = self.workers.wait_timeout(&done, DRY_POLL_WAIT) {
                    flow.settle(finished);
                    settled = true;
                }
            } else if flow.away > 0 && (flush || flow.failed.is_some()) {
                flow.settle(self.workers.wait(&done));
                settled = true;
            }
        }
        self.coordinator.processed(flow.records, flow.output_bytes);
        self.tasks = std::mem::take(&mut flow.home)
            .into_iter()
            .map(|t| t.expect("every task comes back from its worker"))
            .collect();
        flow.failed.take().map_or(Ok(()), Err)
    }

    /// Runs `work` on each task named in `inputs` (task index, input) on the task's worker
    /// thread, all at once; the tasks come back to the runner. Results are in `inputs`' order.
    pub(super) fn on_workers<I, R>(&mut self, inputs: Vec<(usize, I)>, work: fn(&mut Task, I) -> R) -> Vec<(usize, R)>
    where
        I: Send + 'static,
        R: Send + 'static,
    {
        let mut tasks: Vec<Option<Task>> = std::mem::take(&mut self.tasks).into_iter().map(Some).collect();
        let items = inputs
            .into_iter()
            .map(|(index, input)| {
                let task = tasks[index].take().expect("one input per task");
                (self.lanes[task.id()], (index, task, input))
            })
            .collect();
        let done = self.workers.run(items, move |(index, mut task, input)| {
            let result = work(&mut task, input);
            (index, task, result)
        });
        let results = done
            .into_iter()
            .map(|(index, task, result)| {
                tasks[index] = Some(task);
                (index, result)
            })
            .collect();
        self.tasks = tasks.into_iter().map(|t| t.expect("every task comes back from its worker")).collect();
        results
    }
}

/// A task back from its worker ([`Runner::stream`]): its index, itself, what it was given,
/// and the records and output bytes it processed (or why it failed).
type Finished = (usize, Task, Given, Result<(u64, u64), PipelineError>);

/// The records handed to a task, and the memory their batches held ([`RecordBatch::memory`]).
#[derive(Debug, Clone, Copy)]
struct Given {
    records: usize,
    bytes: usize,
}

/// When a batch of records polled is full: at `source.batch_size` records, or at a quarter of
/// the smallest `memory_limit_mb` of the chain's operators ([`GUEST_BATCH_SHARE`]) or
/// [`ResourcePool::read_batch_bytes`] under a tenant's pool, whichever is less, in memory.
/// (A record larger than that is a batch alone.)
#[derive(Debug, Clone, Copy)]
struct BatchLimit {
    records: usize,
    bytes: usize,
}

impl BatchLimit {
    fn full(self, batch: &RecordBatch) -> bool {
        batch.len() >= self.records || batch.memory() >= self.bytes
    }
}

/// The task of the partition the last record came from, within one [`Runner::stream`] (the
/// tasks do not change during it). librdkafka hands out a partition's fetched records together,
/// so most records skip [`Runner::index_of`]'s two hash lookups, which hash the topic name and
/// cost ~2 % of passthrough's CPU.
#[derive(Default)]
struct LastTask {
    topic: String,
    partition: i32,
    /// `None` before the first record.
    index: Option<usize>,
}

/// The tasks while [`Runner::stream`] runs: at home (`Some`) or out on a worker.
struct Flow {
    home: Vec<Option<Task>>,
    /// Per task: batches polled and not yet handed to it, full ones then the one filling.
    waiting: Vec<Vec<RecordBatch>>,
    /// Tasks out, and records polled and not yet processed, and the memory they hold.
    away: usize,
    out_records: usize,
    out_bytes: usize,
    /// The tenant's pool, which `out_bytes` are held from.
    pool: Option<Arc<ResourcePool>>,
    /// Records and output bytes processed, for the epoch.
    records: u64,
    output_bytes: u64,
    failed: Option<PipelineError>,
}

impl Flow {
    fn new(tasks: Vec<Task>, pool: Option<Arc<ResourcePool>>) -> Self {
        let waiting = tasks.iter().map(|_| Vec::new()).collect();
        let home = tasks.into_iter().map(Some).collect();
        Self { home, waiting, away: 0, out_records: 0, out_bytes: 0, pool, records: 0, output_bytes: 0, failed: None }
    }

    /// Whether the runner may poll another record: always while it holds less than
    /// [`READ_FLOOR`] (so every pipeline goes on, in batches of that much at least, when its
    /// tenant's memory is short), else when the pool, if any, lets it.
    fn may_read(&self) -> bool {
        self.out_bytes < READ_FLOOR || self.pool.as_ref().is_none_or(|pool| pool.may_read())
    }

    /// Counts a record polled, whose batch grew by `bytes`.
    fn hold(&mut self, bytes: usize) {
        self.out_records += 1;
        self.out_bytes += bytes;
        if let Some(pool) = self.pool.as_ref().filter(|_| bytes > 0) {
            pool.hold_read(bytes);
        }
    }

    /// Gives `bytes` of the records held back to the pool.
    fn release(&mut self, bytes: usize) {
        self.out_bytes -= bytes;
        if let Some(pool) = self.pool.as_ref().filter(|_| bytes > 0) {
            pool.release_read(bytes);
        }
    }

    /// Takes the batches waiting for task `index` if it is home: the full ones, and the one
    /// filling too when `flush`; none once a task failed.
    fn ready(&mut self, index: usize, flush: bool, limit: BatchLimit) -> Option<Vec<RecordBatch>> {
        if self.failed.is_some() || self.home[index].is_none() {
            return None;
        }
        let waiting = &mut self.waiting[index];
        let filling = waiting.last().is_some_and(|batch| !limit.full(batch)) && !flush;
        let ready = waiting.len() - usize::from(filling);
        (ready > 0).then(|| waiting.drain(..ready).collect())
    }

    fn settle(&mut self, (index, task, given, result): Finished) {
        self.home[index] = Some(task);
        self.away -= 1;
        self.out_records -= given.records;
        self.release(given.bytes);
        match result {
            Ok((records, output_bytes)) => {
                self.records += records;
                self.output_bytes += output_bytes;
            }
            Err(error) => {
                self.failed.get_or_insert(error);
            }
        }
    }
}

impl Drop for Flow {
    /// Batches a failure left waiting are dropped with the flow: their memory goes back too.
    fn drop(&mut self) {
        self.release(self.out_bytes);
    }
}

/// Runs `batches` through `task` in order and sends each one's output to the epoch's slot;
/// returns the records and output bytes.
fn run_batches(task: &mut Task, batches: Vec<RecordBatch>, out: &Out) -> Result<(u64, u64), PipelineError> {
    let (mut records, mut output_bytes) = (0, 0);
    for batch in batches {
        let started = Instant::now();
        let input = Input { records: batch.len() as u64, bytes: batch.bytes(), took: Duration::ZERO };
        let (outputs, dead_letters) = task.process(batch)?;
        let input = Input { took: started.elapsed(), ..input };
        output_bytes += out.send(task, &outputs, &dead_letters, &input)?;
        records += input.records;
    }
    Ok((records, output_bytes))
}

/// Adds `message` to `batch`, copying its bytes once (its buffer is librdkafka's), with the
/// headers `tables` join onto it after its own: so a joined row is memory of the batch as it
/// fills, and counts towards its fullness like the record's own bytes.
fn push_message(batch: &mut RecordBatch, message: &BorrowedMessage<'_>, tables: &Tables) {
    let timestamp = message.timestamp().to_millis().unwrap_or(0);
    let fields = Fields {
        topic: message.topic(),
        partition: message.partition(),
        offset: message.offset(),
        timestamp,
        // The task sets event time and watermark per the source's watermark strategy.
        event_time: timestamp,
        watermark: None,
        key: message.key(),
        value: message.payload(),
    };
    // Null header values stay null.
    let own = record_headers(message).into_iter().map(|h| (h.key, h.value));
    batch.push(fields, own.chain(tables.headers(message.payload())));
}
