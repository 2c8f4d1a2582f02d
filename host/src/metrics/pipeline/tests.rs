use std::path::Path;

use super::*;
use crate::metrics::readiness::MIN_OVERDUE;
use crate::metrics::{BatchFigures, Metrics, Reason};

fn config(name: &str) -> PipelineConfig {
    let text = format!(
        "name = \"{name}\"\n[source]\nbrokers = \"localhost:9092\"\ntopics = [\"flights\"]\n\
         [[transforms]]\nname = \"delays\"\nwasm = \"delays.wasm\"\n[sink]\ntopic = \"out\"\n"
    );
    PipelineConfig::from_toml_str(&text, Path::new("/srv")).expect("valid pipeline file")
}

fn partition(p: i32) -> TaskId {
    TaskId::new("flights", p)
}

#[test]
fn lag_is_the_end_minus_the_position_never_negative_and_kept_when_ends_are_unknown() {
    let metrics = Metrics::default();
    let pipeline = metrics.pipeline(&config("p"));
    pipeline.sample(Some(&BTreeMap::new()));
    assert_eq!(pipeline.view().history[0].lag_records, None, "no lag before the tasks start");
    let (first, second) = (pipeline.task(&partition(0), Some(10)), pipeline.task(&partition(1), Some(5)));
    first.batch(&BatchFigures { records_in: 4, records_out: 3, ..Default::default() });
    first.position(Some(14));
    second.position(Some(7));
    assert_eq!(pipeline.view().lag_records, None, "unknown before the first measurement, not 0");
    assert!(!metrics.encode().contains("weir_source_lag_records"), "{}", metrics.encode());
    // A partition's end below the position (a stale answer) is no negative lag.
    pipeline.sample(Some(&BTreeMap::from([(partition(0), 20), (partition(1), 6)])));
    let view = pipeline.view();
    assert_eq!(view.partitions.iter().map(|p| p.lag_records).collect::<Vec<_>>(), [Some(6), Some(0)]);
    assert_eq!((view.lag_records, view.records_in, view.records_out), (Some(6), 4, 3));
    pipeline.sample(None);
    let view = pipeline.view();
    assert_eq!(view.lag_records, Some(6), "unknown ends keep the last lag");
    assert_eq!(view.history.iter().map(|s| s.lag_records).collect::<Vec<_>>(), [None, Some(6), None]);
}

#[test]
fn one_state_at_a_time_and_failures_keep_their_message() {
    let metrics = Metrics::default();
    let pipeline = metrics.pipeline(&config("p"));
    pipeline.set_state(PipelineState::Running);
    let error = PipelineError::Refused("source topic `flights` does not exist".into());
    pipeline.failed(&error, true);
    let text = metrics.encode();
    assert!(text.contains("weir_pipeline_state{pipeline=\"p\",state=\"recovering\"} 1"), "{text}");
    assert!(text.contains("weir_pipeline_state{pipeline=\"p\",state=\"running\"} 0"), "{text}");
    assert!(text.contains("weir_recoveries_total{pipeline=\"p\"} 1"), "{text}");
    let view = pipeline.view();
    assert_eq!(view.state, PipelineState::Recovering);
    assert!(view.last_error.expect("last error").message.contains("does not exist"));
    pipeline.set_state(PipelineState::Running);
    assert!(pipeline.view().last_error.is_some(), "the last error stays after recovery healed it");
}

#[test]
fn a_failure_met_while_stopping_is_shown_and_the_pipeline_still_stops() {
    let metrics = Metrics::default();
    let pipeline = metrics.pipeline(&config("p"));
    pipeline.set_state(PipelineState::Running);
    pipeline.error_seen(&PipelineError::AssignmentLost(2));
    pipeline.set_state(PipelineState::Stopped);
    let view = pipeline.view();
    assert_eq!(view.state, PipelineState::Stopped);
    assert!(view.last_error.expect("last error").message.contains("2 partition(s)"));
    let text = metrics.encode();
    assert!(text.contains("weir_recoveries_total{pipeline=\"p\"} 0"), "no recovery: {text}");
}

#[test]
fn a_pipeline_that_starts_again_keeps_its_counters() {
    let metrics = Metrics::default();
    let first = metrics.pipeline(&config("p"));
    first.task(&partition(0), Some(0)).batch(&BatchFigures { records_in: 2, ..Default::default() });
    let again = metrics.pipeline(&config("p"));
    again.task(&partition(0), Some(2)).batch(&BatchFigures { records_in: 3, ..Default::default() });
    assert_eq!(metrics.pipelines().len(), 1);
    assert_eq!(again.view().records_in, 5);
    metrics.pipeline(&config("q"));
    assert_eq!(metrics.view().pipelines.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["p", "q"]);
}

#[test]
fn readiness_follows_what_the_runner_and_the_sampler_report() {
    let metrics = Metrics::default();
    let pipeline = metrics.pipeline(&config("p"));
    let reason = |pipeline: &PipelineMetrics| pipeline.readiness().reason;
    assert_eq!(reason(&pipeline), Some(Reason::Starting));
    pipeline.set_state(PipelineState::Running);
    assert_eq!(reason(&pipeline), Some(Reason::Joining));
    pipeline.restoring(2);
    assert_eq!(reason(&pipeline), Some(Reason::Restoring));
    pipeline.assigned(2);
    assert_eq!(reason(&pipeline), Some(Reason::Starting), "before its first checkpoint round");
    pipeline.caught_up();
    let ready = pipeline.readiness();
    assert!(ready.ready && ready.reason.is_none() && ready.detail.is_none(), "{ready:?}");
    assert_eq!(metrics.readiness().total, 1);
    assert!(metrics.readiness().ready);

    // An answer to a request sent before the cluster was found unreachable is older news.
    let asked = Instant::now();
    pipeline.broker_unreachable(&"Local: All broker connections are down");
    pipeline.broker_reachable(asked);
    let unreachable = pipeline.readiness();
    assert_eq!(unreachable.reason, Some(Reason::BrokerUnreachable));
    assert!(unreachable.detail.expect("detail").contains("All broker connections are down"));
    pipeline.broker_reachable(Instant::now());
    assert!(pipeline.readiness().ready);

    // Work left uncommitted past the limit; a round with nothing to commit makes it current.
    let later = Instant::now() + MIN_OVERDUE + Duration::from_secs(1);
    assert_eq!(pipeline.readiness_at(later).reason, Some(Reason::CheckpointOverdue));
    pipeline.caught_up();
    assert!(pipeline.readiness_at(Instant::now()).ready);

    pipeline.failed(&PipelineError::Refused("no".into()), false);
    let failed = metrics.readiness();
    assert_eq!(failed.reason, Some(Reason::Failed));
    assert_eq!(failed.pipelines.expect("pipelines")[0].detail.as_deref(), Some("refusing to start: no"));
}

#[test]
fn a_process_without_its_pipeline_yet_is_not_ready() {
    let readiness = Metrics::default().readiness();
    assert_eq!((readiness.ready, readiness.reason), (false, Some(Reason::Starting)));
}

fn figures(id: u64) -> CheckpointFigures {
    CheckpointFigures {
        id: CheckpointId(id),
        total: Duration::from_millis(10),
        stall: Duration::from_millis(2),
        barrier: Duration::from_millis(1),
        pre_commit: Duration::from_millis(4),
        commit: Duration::from_millis(3),
        apply: Duration::from_millis(2),
        records: id * 10,
        output_bytes: id * 100,
        state_bytes: id,
    }
}

#[test]
fn failures_and_checkpoints_keep_a_bounded_history_newest_first() {
    let metrics = Metrics::default();
    let pipeline = metrics.pipeline(&config("p"));
    for n in 0..FAILURES_KEPT + 3 {
        pipeline.failed(&PipelineError::Refused(format!("failure {n}")), true);
    }
    pipeline.error_seen(&PipelineError::Refused("while stopping".into()));
    let view = pipeline.view();
    assert_eq!(view.failures.len(), FAILURES_KEPT);
    assert_eq!(
        (view.failures[0].message.as_str(), view.failures[0].outcome),
        ("refusing to start: while stopping", "stopping")
    );
    assert_eq!(view.failures[1].outcome, "recovering");
    assert!(view.failures[1].message.ends_with(&format!("failure {}", FAILURES_KEPT + 2)));
    pipeline.clear_last_error();
    assert!(pipeline.view().failures.is_empty(), "a redeployed pipeline starts a new history");

    for id in 1..=(CHECKPOINTS_KEPT as u64 + 5) {
        pipeline.checkpoint(&figures(id));
    }
    let view = pipeline.view();
    let ids: Vec<u64> = view.checkpoints.iter().map(|c| c.id).collect();
    let newest = CHECKPOINTS_KEPT as u64 + 5;
    assert_eq!(ids, (6..=newest).rev().collect::<Vec<_>>());
    assert_eq!(view.last_checkpoint.map(|c| c.id), Some(newest));
    assert_eq!(view.checkpoints[0].state_bytes, newest);
    // The activity counts how long processing paused (the stall), not the whole checkpoint.
    assert!((view.activity.checkpoint_seconds - 0.002 * newest as f64).abs() < 1e-9, "{:?}", view.activity);
}

#[test]
fn the_graph_counts_each_operator_and_dead_letters_name_their_record() {
    let metrics = Metrics::default();
    let pipeline = metrics.pipeline(&config("p"));
    let task = pipeline.task(&partition(0), Some(0));
    let operator = pipeline.operator("delays", &partition(0));
    operator.call(Duration::from_millis(5), 10, 8);
    let error = OperatorError {
        operator: "delays".into(),
        call: crate::wasm::Call::Process,
        offsets: None,
        kind: ErrorKind::Guest { message: "bad flight".into(), offset: None },
    };
    pipeline.guest_error(&error);
    pipeline.dead_letter(&error, "flights", 0, 41);
    task.batch(&BatchFigures { records_in: 10, records_out: 8, dead_letters: 1, ..Default::default() });
    let view = pipeline.view();
    assert_eq!(view.graph.sources, ["flights"]);
    assert_eq!(view.graph.sinks, ["out"]);
    let delays = &view.graph.operators[0];
    assert_eq!((delays.name.as_str(), delays.records_in, delays.records_out, delays.errors), ("delays", 10, 8, 1));
    assert!((delays.guest_seconds - 0.005).abs() < 1e-9);
    assert_eq!(view.dead_letters.count, 1);
    let last = view.dead_letters.last.expect("the last dead letter");
    assert_eq!((last.position.as_str(), last.operator.as_str()), ("flights[0]@41", "delays"));
    assert!(last.reason.contains("bad flight"), "{}", last.reason);
    let text = metrics.encode();
    let series = |name: &str, label: &str| {
        text.lines().find(|l| l.starts_with(&format!("{name}{{")) && l.contains(label)).map(|l| l.rsplit(' ').next())
    };
    assert_eq!(series("weir_operator_records_in_total", "operator=\"delays\""), Some(Some("10")), "{text}");
    assert_eq!(series("weir_activity_seconds_total", "activity=\"guest\""), Some(Some("0.005")), "{text}");
}

#[test]
fn event_time_shows_how_far_the_watermark_trails_and_whether_the_partition_is_idle() {
    let metrics = Metrics::default();
    let pipeline = metrics.pipeline(&config("p"));
    let task = pipeline.task(&partition(0), Some(0));
    task.event_time(Some(1_000), Some(6_000), 2);
    let partition = &pipeline.view().partitions[0];
    assert_eq!((partition.watermark_ms, partition.newest_event_ms), (Some(1_000), Some(6_000)));
    assert_eq!(partition.watermark_behind_newest_ms, Some(5_000));
    assert!(partition.watermark_delay_ms.is_some_and(|d| d > 1_000_000), "far behind the clock");
    assert!(!partition.idle);
    task.idle(Some(7_000));
    let view = pipeline.view();
    assert!(view.partitions[0].idle);
    assert_eq!(view.partitions[0].watermark_ms, Some(7_000));
    assert_eq!(view.late_records, 2);
    task.event_time(Some(7_000), Some(9_000), 0);
    assert!(!pipeline.view().partitions[0].idle, "a record ends idleness");
    pipeline.open_timers(1000, true);
    let timers = pipeline.view().open_timers.expect("counted");
    assert_eq!((timers.count, timers.capped), (1000, true));
}

#[test]
fn a_forgotten_pipeline_leaves_no_series_and_starts_from_zero_under_its_name() {
    let metrics = Metrics::default();
    let (gone, kept) = (metrics.pipeline(&config("gone")), metrics.pipeline(&config("kept")));
    for pipeline in [&gone, &kept] {
        pipeline.task(&partition(0), Some(0)).batch(&BatchFigures {
            records_in: 4,
            records_out: 3,
            ..Default::default()
        });
        pipeline.set_state(PipelineState::Running);
        pipeline.failed(&PipelineError::Refused("no".into()), true);
    }
    metrics.forget("gone");
    let text = metrics.encode();
    assert!(!text.contains("pipeline=\"gone\""), "{text}");
    assert!(text.contains("weir_records_in_total{partition=\"flights[0]\",pipeline=\"kept\"} 4"), "{text}");
    assert_eq!(metrics.pipelines().iter().map(|p| p.name().to_owned()).collect::<Vec<_>>(), ["kept"]);
    let again = metrics.pipeline(&config("gone"));
    again.task(&partition(0), Some(0)).batch(&BatchFigures { records_in: 1, ..Default::default() });
    assert_eq!(again.view().records_in, 1, "a new pipeline under the name starts from zero");
}
