use super::*;

fn running(interval_ms: u64) -> Signals {
    let mut signals = Signals::new(Duration::from_millis(interval_ms));
    signals.entered(PipelineState::Running);
    signals.assigned = Some(2);
    signals.checkpointed = true;
    signals
}

fn reason(signals: &Signals, state: PipelineState, now: Instant) -> Option<Reason> {
    signals.judge(state, None, now).map(|(reason, _)| reason)
}

#[test]
fn the_overdue_limit_is_three_intervals_and_at_least_ten_seconds() {
    assert_eq!(overdue_after(Duration::from_millis(20)), MIN_OVERDUE);
    assert_eq!(overdue_after(Duration::from_secs(1)), Duration::from_secs(10));
    assert_eq!(overdue_after(Duration::from_secs(60)), Duration::from_secs(180));
}

#[test]
fn a_running_assigned_current_pipeline_is_ready_until_its_work_is_overdue() {
    let signals = running(1000);
    let now = Instant::now();
    assert_eq!(signals.judge(PipelineState::Running, None, now), None);
    let late = now + MIN_OVERDUE + Duration::from_secs(1);
    let (reason, detail) = signals.judge(PipelineState::Running, None, late).expect("overdue");
    assert_eq!(reason, Reason::CheckpointOverdue);
    assert!(detail.contains("checkpoint.interval_ms = 1000") && detail.contains("after 10 s"), "{detail}");
}

#[test]
fn each_reason_applies_in_its_order() {
    let now = Instant::now();
    let mut signals = Signals::new(Duration::from_secs(1));
    assert_eq!(reason(&signals, PipelineState::Starting, now), Some(Reason::Starting));
    signals.entered(PipelineState::Running);
    assert_eq!(reason(&signals, PipelineState::Running, now), Some(Reason::Joining), "no assignment yet");
    signals.restoring = Some((4, now));
    assert_eq!(reason(&signals, PipelineState::Running, now), Some(Reason::Restoring), "before joining");
    signals.unreachable = Some(Unreachable { since: now, last: now, error: "all brokers down".into() });
    assert_eq!(reason(&signals, PipelineState::Running, now), Some(Reason::BrokerUnreachable));
    assert_eq!(reason(&signals, PipelineState::Recovering, now), Some(Reason::BrokerUnreachable), "the cause first");
    assert_eq!(reason(&signals, PipelineState::Failed, now), Some(Reason::Failed), "a human must act");
    assert_eq!(reason(&signals, PipelineState::Stopped, now), Some(Reason::Stopped));
    signals.unreachable = None;
    let error = ErrorView { message: "misbehave: error at offset 1".into(), at_ms: 0, outcome: "recovering" };
    let (reason, detail) = signals.judge(PipelineState::Recovering, Some(&error), now).expect("not ready");
    assert_eq!(reason, Reason::Recovering);
    assert!(detail.contains("misbehave: error at offset 1"), "{detail}");
}

#[test]
fn a_start_is_not_ready_before_its_first_checkpoint_round() {
    // A transform failing every record fails each start within the overdue limit: between its
    // recoveries it must not read as ready.
    let mut signals = running(1000);
    signals.entered(PipelineState::Recovering);
    signals.entered(PipelineState::Running);
    signals.assigned = Some(2);
    let now = Instant::now();
    let (reason, detail) = signals.judge(PipelineState::Running, None, now).expect("not ready yet");
    assert_eq!(reason, Reason::Starting);
    assert!(detail.contains("first checkpoint round"), "{detail}");
    signals.checkpointed = true;
    assert_eq!(signals.judge(PipelineState::Running, None, now), None);
}

#[test]
fn a_state_change_forgets_the_restore_and_anything_but_running_the_assignment() {
    let mut signals = running(1000);
    signals.restoring = Some((1, Instant::now()));
    signals.entered(PipelineState::Recovering);
    assert_eq!((signals.restoring, signals.assigned), (None, None));
}

#[test]
fn a_process_is_ready_when_each_pipeline_is_and_counts_the_others_by_reason() {
    let ready = |name: &str| PipelineReadiness { name: name.into(), ready: true, reason: None, detail: None };
    let not = |name: &str, reason| PipelineReadiness {
        name: name.into(),
        ready: false,
        reason: Some(reason),
        detail: Some("why".into()),
    };
    let all = Readiness::of(vec![ready("a"), ready("b")]);
    assert!(all.ready && all.reason.is_none() && all.not_ready.is_empty() && all.total == 2);
    assert!(Readiness::of(vec![]).ready, "nothing to judge");
    assert!(!Readiness::starting().ready);

    let some = Readiness::of(vec![
        not("a", Reason::Restoring),
        ready("b"),
        not("c", Reason::Failed),
        not("d", Reason::Restoring),
    ]);
    assert!(!some.ready);
    assert_eq!(some.reason, Some(Reason::Failed), "the first in precedence");
    assert_eq!(some.not_ready, BTreeMap::from([(Reason::Failed, 1), (Reason::Restoring, 2)]));
    let json = serde_json::to_value(some.clone()).expect("JSON");
    assert_eq!(json["not_ready"], serde_json::json!({ "failed": 1, "restoring": 2 }));
    assert_eq!(json["pipelines"][0]["reason"], "restoring");
    assert_eq!(json["pipelines"][1]["reason"], serde_json::Value::Null);
    let anonymous = serde_json::to_value(some.without_pipelines()).expect("JSON");
    assert!(anonymous.get("pipelines").is_none(), "{anonymous}");
    assert_eq!((anonymous["reason"].clone(), anonymous["total"].clone()), ("failed".into(), 4.into()));
}
