//! Worker threads (`[runtime] workers`): each runs the tasks placed on it, so a task's operator
//! instances are only ever called from one thread while the task is assigned. The runner's
//! thread polls and checkpoints; it hands each task's batches to the task's thread as they fill
//! ([`Workers::spawn`]; they send their tasks' output themselves), and runs barriers and timers
//! as rounds on every thread at once ([`Workers::run`]), so a barrier reaches every thread.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::wasm::ResourcePool;

type Job = Box<dyn FnOnce() + Send>;

/// A fixed set of threads, numbered from 0 (a task's lane).
pub struct Workers {
    lanes: Vec<mpsc::Sender<Job>>,
    threads: Vec<JoinHandle<()>>,
}

impl Workers {
    /// Starts `count` threads (at least one), named `weir-worker-<n>`. With a `pool`, each job
    /// is metered in its CPU share ([`ResourcePool::meter`]): guest calls and the host work
    /// around them alike; a job waits for the pool's share until `stop` is set.
    ///
    /// # Errors
    /// When the operating system refuses a thread.
    pub fn start(count: usize, pool: Option<Arc<ResourcePool>>, stop: &Arc<AtomicBool>) -> std::io::Result<Self> {
        let mut lanes = Vec::new();
        let mut threads = Vec::new();
        for n in 0..count.max(1) {
            let (jobs, inbox) = mpsc::channel::<Job>();
            // The starting thread's span (`weir serve` names the pipeline in it) covers the
            // workers' log lines too.
            let span = tracing::Span::current();
            let (pool, stop) = (pool.clone(), stop.clone());
            threads.push(std::thread::Builder::new().name(format!("weir-worker-{n}")).spawn(move || {
                let _span = span.enter();
                for job in inbox {
                    let _meter = pool.as_ref().map(|pool| pool.meter(Some(&*stop)));
                    job();
                }
            })?);
            lanes.push(jobs);
        }
        Ok(Self { lanes, threads })
    }

    /// The number of threads.
    pub fn len(&self) -> usize {
        self.lanes.len()
    }

    /// Runs `work` on every item, each on the lane it names (modulo the number of lanes), the
    /// items of one lane in order; returns the results in the order of `items` once all are done.
    ///
    /// # Panics
    /// When `work` panicked on a worker thread (the thread is gone with it).
    pub fn run<T, R, F>(&self, items: Vec<(usize, T)>, work: F) -> Vec<R>
    where
        T: Send + 'static,
        R: Send + 'static,
        F: Fn(T) -> R + Clone + Send + 'static,
    {
        let count = items.len();
        let mut per_lane: Vec<Vec<(usize, T)>> = (0..self.lanes.len()).map(|_| Vec::new()).collect();
        for (position, (lane, item)) in items.into_iter().enumerate() {
            per_lane[lane % self.lanes.len()].push((position, item));
        }
        let (done, results) = mpsc::channel::<(usize, R)>();
        for (lane, items) in self.lanes.iter().zip(per_lane).filter(|(_, items)| !items.is_empty()) {
            let (done, work) = (done.clone(), work.clone());
            let job: Job = Box::new(move || {
                for (position, item) in items {
                    // The receiver outlives the round: a failed send means the runner is gone.
                    let _ = done.send((position, work(item)));
                }
            });
            lane.send(job).expect("a worker thread panicked earlier (a bug in Weir or a transform host call)");
        }
        drop(done);
        let mut ordered: Vec<Option<R>> = (0..count).map(|_| None).collect();
        for (position, result) in results {
            ordered[position] = Some(result);
        }
        ordered
            .into_iter()
            .map(|r| r.expect("a worker thread panicked (a bug in Weir or a transform host call)"))
            .collect()
    }
}

impl Workers {
    /// Runs `job` on thread `lane` (modulo the number of threads), after the jobs sent to it
    /// before; its result comes back however `job` sends it (see [`Workers::wait`]).
    ///
    /// # Panics
    /// When the thread panicked earlier.
    pub fn spawn(&self, lane: usize, job: impl FnOnce() + Send + 'static) {
        self.lanes[lane % self.lanes.len()]
            .send(Box::new(job))
            .expect("a worker thread panicked earlier (a bug in Weir or a transform host call)");
    }

    /// The next result a [`Workers::spawn`]ed job sends on `results`.
    ///
    /// # Panics
    /// When a worker thread panicked (its job never sends).
    pub fn wait<R>(&self, results: &mpsc::Receiver<R>) -> R {
        loop {
            if let Some(result) = self.wait_timeout(results, Duration::from_secs(1)) {
                return result;
            }
        }
    }

    /// As [`Workers::wait`], but `None` once `timeout` has passed without a result.
    ///
    /// # Panics
    /// When a worker thread panicked (its job never sends).
    pub fn wait_timeout<R>(&self, results: &mpsc::Receiver<R>, timeout: Duration) -> Option<R> {
        match results.recv_timeout(timeout) {
            Ok(result) => Some(result),
            Err(mpsc::RecvTimeoutError::Timeout) if self.threads.iter().all(|t| !t.is_finished()) => None,
            Err(_) => panic!("a worker thread panicked (a bug in Weir or a transform host call)"),
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.lanes.clear();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_come_back_in_item_order_and_each_lane_keeps_one_thread() {
        let workers = Workers::start(3, None, &Arc::default()).unwrap();
        let items: Vec<(usize, u32)> = (0..20).map(|i| (i % 3, i as u32)).collect();
        let results = workers.run(items, |i| (i, std::thread::current().name().unwrap().to_owned()));
        assert_eq!(results.iter().map(|(i, _)| *i).collect::<Vec<_>>(), (0..20).collect::<Vec<_>>());
        for (i, thread) in &results {
            assert_eq!(thread, &format!("weir-worker-{}", i % 3));
        }
    }

    #[test]
    fn spawned_jobs_run_in_order_per_lane_and_lanes_run_apart() {
        let workers = Workers::start(2, None, &Arc::default()).unwrap();
        let (results, done) = mpsc::channel();
        // Lane 0's first job waits until lane 1 has run both of its jobs: lanes do not wait
        // for each other's earlier jobs.
        let (gate_tx, gate) = mpsc::channel::<()>();
        let tx = results.clone();
        workers.spawn(0, move || {
            gate.recv().unwrap();
            tx.send((0, 1)).unwrap();
        });
        let tx = results.clone();
        workers.spawn(0, move || tx.send((0, 2)).unwrap());
        for n in 1..=2 {
            let tx = results.clone();
            workers.spawn(1, move || tx.send((1, n)).unwrap());
        }
        assert_eq!([workers.wait(&done), workers.wait(&done)], [(1, 1), (1, 2)]);
        gate_tx.send(()).unwrap();
        assert_eq!([workers.wait(&done), workers.wait(&done)], [(0, 1), (0, 2)]);
    }

    #[test]
    #[should_panic(expected = "a worker thread panicked")]
    fn waiting_for_a_job_whose_thread_panicked_panics() {
        let workers = Workers::start(1, None, &Arc::default()).unwrap();
        let (_results, done) = mpsc::channel::<()>();
        workers.spawn(0, || panic!("boom"));
        workers.wait(&done);
    }

    #[test]
    fn a_bounded_wait_gives_up_without_a_result_and_takes_one_that_comes() {
        let workers = Workers::start(1, None, &Arc::default()).unwrap();
        let (results, done) = mpsc::channel();
        let (gate_tx, gate) = mpsc::channel::<()>();
        workers.spawn(0, move || {
            gate.recv().unwrap();
            results.send(7).unwrap();
        });
        assert_eq!(workers.wait_timeout(&done, Duration::from_millis(10)), None);
        gate_tx.send(()).unwrap();
        assert_eq!(workers.wait_timeout(&done, Duration::from_secs(60)), Some(7));
    }

    #[test]
    #[should_panic(expected = "a worker thread panicked")]
    fn a_bounded_wait_for_a_job_whose_thread_panicked_panics() {
        let workers = Workers::start(1, None, &Arc::default()).unwrap();
        let (_results, done) = mpsc::channel::<()>();
        workers.spawn(0, || panic!("boom"));
        // Until the thread has ended, a bounded wait may give up: wait until it panics.
        while workers.wait_timeout(&done, Duration::from_millis(10)).is_none() {}
    }

    #[test]
    fn an_empty_round_returns_nothing() {
        let workers = Workers::start(0, None, &Arc::default()).unwrap();
        assert_eq!(workers.len(), 1);
        assert!(workers.run(Vec::<(usize, ())>::new(), |()| ()).is_empty());
    }
}
