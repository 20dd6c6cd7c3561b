//! Printing alerts as they happen (watch, lab).

use tenge_trace::analysis::window::Alert;
use tenge_trace::os::CgroupNames;
use tenge_trace::trace_file::TraceMeta;

pub struct AlertPrinter {
    json: bool,
    boot_offset_ns: i64,
    pub count: u64,
    /// Cgroup paths, looked up as alerts name new ones.
    cgroups: CgroupNames,
}

impl AlertPrinter {
    pub fn new(json: bool) -> AlertPrinter {
        AlertPrinter {
            json,
            boot_offset_ns: TraceMeta::for_this_host().boot_offset_ns,
            count: 0,
            cgroups: CgroupNames::default(),
        }
    }

    pub fn print(&mut self, alert: &Alert) {
        self.count += u64::from(!alert.cleared);
        let mut alert = alert.clone();
        if let Some(task) = &mut alert.process {
            if let Some(path) = self.cgroups.name(task.cgroup_id) {
                task.name_cgroup(path);
            }
        }
        if self.json {
            let mut value = serde_json::to_value(&alert).expect("alerts serialize");
            value["type"] = if alert.cleared { "cleared" } else { "alert" }.into();
            println!("{value}");
        } else {
            let unix_ns = alert.ts_ns as i64 + self.boot_offset_ns;
            let day_ns = unix_ns.rem_euclid(86_400 * 1_000_000_000);
            let (h, m, s, ms) = (
                day_ns / 3_600_000_000_000,
                day_ns / 60_000_000_000 % 60,
                day_ns / 1_000_000_000 % 60,
                day_ns / 1_000_000 % 1000,
            );
            let kind = serde_json::to_value(alert.kind).expect("kinds serialize");
            let process = alert.process.as_ref().map_or(String::new(), |t| {
                format!(
                    " {}{}",
                    t.label(),
                    t.cgroup
                        .as_ref()
                        .map_or(String::new(), |c| format!(" in {c}"))
                )
            });
            let line = format!(
                "{:<7} {:<14} {} (cookie {}{process}): {}",
                if alert.cleared { "CLEARED" } else { "ALERT" },
                kind.as_str().unwrap_or("?"),
                alert.flow,
                alert.sock_cookie,
                alert.message
            );
            let line = super::terminal::stdout().text(&line).into_owned();
            println!("{h:02}:{m:02}:{s:02}.{ms:03} UTC  {line}");
        }
    }
}
