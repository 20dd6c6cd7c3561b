//! The JSON contract: schema/*.json against what `dump --json`, `report
//! --json` and `watch --json` print (built by the same library calls), on
//! synthetic events and on a real lab transfer (root).

mod common;

use serde_json::{json, Value};
use std::path::Path;
use std::sync::atomic::AtomicBool;
use tenge_trace::analysis::window::Alert;
use tenge_trace::analysis::{Analysis, AnalysisConfig, Provenance, Report, RetireConfig};
use tenge_trace::event::Event;
use tenge_trace::export::json::event_json;
use tenge_trace::lab::{traced::run_traced, Lab, Scenario};
use tenge_trace::probe::TracerOptions;

fn load(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("schema")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

struct Schemas {
    dump: jsonschema::Validator,
    report: jsonschema::Validator,
    watch: jsonschema::Validator,
}

impl Schemas {
    fn load() -> Schemas {
        let report = load("report.schema.json");
        for schema in [
            &report,
            &load("dump-event.schema.json"),
            &load("watch-line.schema.json"),
        ] {
            jsonschema::meta::validate(schema).expect("a valid JSON Schema");
        }
        // watch-line refers to report.schema.json by its $id.
        let registry = jsonschema::Registry::new()
            .add(report["$id"].as_str().unwrap(), report.clone())
            .unwrap()
            .prepare()
            .unwrap();
        Schemas {
            dump: jsonschema::validator_for(&load("dump-event.schema.json")).unwrap(),
            report: jsonschema::validator_for(&report).unwrap(),
            watch: jsonschema::options()
                .with_registry(&registry)
                .build(&load("watch-line.schema.json"))
                .unwrap(),
        }
    }
}

#[track_caller]
fn assert_valid(validator: &jsonschema::Validator, doc: &Value) {
    let errors: Vec<String> = validator
        .iter_errors(doc)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .take(5)
        .collect();
    assert!(errors.is_empty(), "{errors:#?}\nin {doc:#}");
}

/// What `watch --json` prints for an alert, and at exit.
fn alert_line(alert: &Alert) -> Value {
    let mut value = serde_json::to_value(alert).unwrap();
    value["type"] = "alert".into();
    value
}

fn summary_line(report: &Report) -> Value {
    json!({ "type": "summary", "report": report })
}

/// The paper's receiver: 26844 (= 3 x 8948) advertised, 20 times.
#[test]
fn schemas_accept_the_output_and_require_the_contract_fields() {
    let schemas = Schemas::load();
    let events = common::clamped_windows();
    let mut analysis = Analysis::new(AnalysisConfig::default());
    for ev in &events {
        let line = event_json(ev);
        assert_valid(&schemas.dump, &line);
        analysis.push(ev);
    }
    let report = serde_json::to_value(analysis.finish(Provenance::default())).unwrap();
    assert_valid(&schemas.report, &report);
    assert_valid(
        &schemas.watch,
        &json!({ "type": "summary", "report": report }),
    );
    // With retirement (watch's default), the report says what was retired.
    let mut retiring = Analysis::new(AnalysisConfig {
        retire: Some(RetireConfig::default()),
        ..AnalysisConfig::default()
    });
    for ev in &events {
        retiring.push(ev);
    }
    let retired = serde_json::to_value(retiring.finish(Provenance::default())).unwrap();
    assert_valid(&schemas.report, &retired);
    assert!(report.get("retirement").is_none());
    let mut bogus_retirement = retired.clone();
    bogus_retirement["retirement"]
        .as_object_mut()
        .unwrap()
        .remove("rows_folded");
    assert!(!schemas.report.is_valid(&bogus_retirement));
    let alert = json!({"type": "alert", "ts_ns": 1, "sock_cookie": 4242,
        "flow": "198.18.0.2:5001 -> 198.18.0.1:40000", "kind": "mss_clamp", "message": "m",
        "figures": {"share": 0.41, "threshold_pct": 20.0, "bytes": 12481, "srtt_us": 2244}});
    assert_valid(&schemas.watch, &alert);

    // Each contract field is required: without it, the document fails.
    let without = |doc: &Value, pointer: &str| {
        let mut doc = doc.clone();
        let (parent, field) = pointer.rsplit_once('/').unwrap();
        doc.pointer_mut(parent)
            .and_then(Value::as_object_mut)
            .unwrap_or_else(|| panic!("{parent} missing"))
            .remove(field)
            .unwrap_or_else(|| panic!("{pointer} missing"));
        doc
    };
    for pointer in [
        "/events_lost",
        "/flows/0/sock_cookie",
        "/flows/0/src",
        "/flows/0/mss/receiver_estimate",
        "/flows/0/window/mss_rounding_bytes_lost",
        "/flows/0/window/sws_stalls",
        "/flows/0/window/mss_allowed_window",
        "/flows/0/limits/rwnd",
        "/flows/0/alerts",
        "/paths",
    ] {
        assert!(
            !schemas.report.is_valid(&without(&report, pointer)),
            "report without {pointer} passed"
        );
    }
    let line = event_json(&events[0]);
    for pointer in [
        "/kind",
        "/ts_ns",
        "/sock_cookie",
        "/saddr",
        "/window",
        "/rcv_mss",
    ] {
        assert!(
            !schemas.dump.is_valid(&without(&line, pointer)),
            "event without {pointer} passed"
        );
    }
    assert!(!schemas.watch.is_valid(&without(&alert, "/type")));
    assert!(!schemas.watch.is_valid(&without(&alert, "/figures")));
    let mut bogus = alert.clone();
    bogus["kind"] = "bogus".into();
    assert!(!schemas.watch.is_valid(&bogus));
}

#[test]
fn a_real_transfer_matches_the_schemas() {
    if !common::require_root("a_real_transfer_matches_the_schemas") {
        return;
    }
    let schemas = Schemas::load();
    // Zero windows and probes: the report has stalls, the stream has alerts.
    let cfg = Scenario::SwsStall.config();
    let lab = Lab::new(&cfg).unwrap();
    let mut analysis = Analysis::new(AnalysisConfig::default());
    let mut kinds = std::collections::BTreeSet::new();
    let mut alerts = Vec::new();
    let run = run_traced(
        &lab,
        &cfg,
        TracerOptions::default(),
        &AtomicBool::new(false),
        |record| {
            let ev = Event::decode(record).expect("the kernel's records decode");
            let line = event_json(&ev);
            assert_valid(&schemas.dump, &line);
            kinds.insert(ev.kind_name());
            alerts.extend(analysis.push(&ev).map(|a| alert_line(&a)));
        },
        |_| {},
        |_| {},
    )
    .unwrap();
    assert!(run.transfer.completed);
    for kind in ["sendmsg", "window_adv", "tcp_rcv", "dev_xmit", "app_read"] {
        assert!(kinds.contains(kind), "no {kind} event in {kinds:?}");
    }
    assert!(
        alerts.iter().any(|a| a["kind"] == "sws_stall"),
        "{alerts:#?}"
    );
    for line in &alerts {
        assert_valid(&schemas.watch, line);
    }
    let report = analysis.finish(Provenance {
        kernel_release: "test".into(),
        sample_every: 1,
        lost: Default::default(),
        hits_not_run: Some(2),
        damage: None,
    });
    let stalls: usize = report.flows.iter().map(|f| f.window.sws_stalls.len()).sum();
    assert!(stalls > 0 && !report.path_costs.paths.is_empty());
    assert_valid(&schemas.report, &serde_json::to_value(&report).unwrap());
    assert_valid(&schemas.watch, &summary_line(&report));
}
