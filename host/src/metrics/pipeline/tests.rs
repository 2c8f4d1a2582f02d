use std::path::Path;

use super::*;
use crate::metrics::{BatchFigures, MIN_OVERDUE, Metrics, Reason};

fn config(name: &str) -> PipelineConfig {
    let text = format!(
        "name = \"{name}\"\n[source]\nbrokers = \"localhost:9092\"\ntopics = [\"flights\"]\n\
         [[transforms]]\nname = \"delays\"\nwasm = \"delays.wasm\"\n[sink]\ntopic = \"out\"\n"
    );
    PipelineConfig::from_toml_str(&text, Path::new("/srv")).expect("valid pipeline file")
}

fn partition(p: i32) -> TaskId {
    TaskId { topic: "flights".into(), partition: p }
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
