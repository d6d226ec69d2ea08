//! One file because the table, JSON and SVG timeline are views of one verdict sharing helpers.
//!
//! Human-readable output of a checked history: a text summary table, and reports written to a
//! file as HTML (with an inline SVG timeline), bare SVG, or JSON.
//!
//! Every output is self-contained: no external scripts, styles or fonts. The HTML page embeds
//! the same document as the `.json` report (`{"history": …, "verdict": …}`) in a
//! `<script type="application/json" id="history">` block, so a page can be turned back into data.
//!
//! # Timeline
//!
//! One row per node (grey bars: up and reachable), then, per resource, one row per client that
//! held it. A section is a bar in its client's colour: solid while the holder believed itself
//! valid, faded after its own deadline if it stayed longer; a section whose holder crashed ends
//! in a black tick, and its lock's remaining life (to its deadline plus the lock-delay) is a thin
//! dashed line; so does one whose holder handed its lock off (`client-handoff`), whose deadline
//! is the extension's. Overlaps and holders beyond a semaphore's permits are red bands across the
//! resource's rows, acquisitions within the lock-delay orange ones; faults are dashed vertical
//! lines labelled at the top. Hovering any shape shows its details (SVG `<title>`).
//!
//! # Table
//! The text table has one row per resource. A semaphore run adds `most holders` (the most
//! acquisitions believed valid at once) and `over permits` (entries beyond the permits); a run
//! with a lock-delay, or with locks left unreleased, adds `unreleased` (sections that ended
//! without a release while valid) and `delay violations`. A run with `client-handoff` faults adds
//! a line under the rows counting the handoffs and how many were extended. A plain lock run's
//! table is as it always was.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io;
use std::path::Path;

use serde::Serialize;

use crate::checker::{Gap, Verdict, majority_up};
use crate::history::{FaultEvent, FaultKind, History, Section};

/// A fixed-width text table with one row per resource, followed by `SAFE` or `VIOLATIONS: n`.
#[must_use]
pub fn summary_table(verdict: &Verdict, history: &History) -> String {
    let semaphore = verdict.permits.is_some();
    let delay = verdict.lock_delay_us > 0 || verdict.resources.iter().any(|r| r.unreleased > 0);
    let mut headers = vec![
        "resource",
        "sections",
        "overlaps",
        "stale rejected",
        "token violations",
    ];
    if semaphore {
        headers.extend(["most holders", "over permits"]);
    }
    if delay {
        headers.extend(["unreleased", "delay violations"]);
    }
    headers.push("longest gap ms");
    let rows: Vec<Vec<String>> = verdict
        .resources
        .iter()
        .map(|r| {
            let mut row = vec![
                r.resource.clone(),
                r.sections.to_string(),
                r.overlaps.len().to_string(),
                r.stale_writes_rejected.to_string(),
                r.token_violations.len().to_string(),
            ];
            if semaphore {
                row.extend([r.most_holders.to_string(), r.excess.len().to_string()]);
            }
            if delay {
                row.extend([
                    r.unreleased.to_string(),
                    r.delay_violations.len().to_string(),
                ]);
            }
            row.push(
                r.longest_gap
                    .map_or_else(|| "-".to_owned(), |g| format_ms(g.len_us())),
            );
            row
        })
        .collect();
    let widths: Vec<usize> = (0..headers.len())
        .map(|c| {
            rows.iter()
                .map(|row| row[c].len())
                .chain([headers[c].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();

    let mut out = format!(
        "strategy {}, seed {}, {} nodes, {} clients, {} ms",
        history.strategy,
        history.seed,
        history.nodes,
        history.clients,
        format_ms(history.duration_us)
    );
    if let Some(k) = verdict.permits {
        let _ = write!(out, ", {k} permits");
    }
    if verdict.lock_delay_us > 0 || history.lock_delay_us > 0 {
        let _ = write!(out, ", lock-delay {} ms", format_ms(history.lock_delay_us));
        if verdict.lock_delay_us != history.lock_delay_us {
            let _ = write!(
                out,
                " (checked against {} ms)",
                format_ms(verdict.lock_delay_us)
            );
        }
    }
    out.push('\n');
    let mut line = |cells: &[&str]| {
        // The resource name is text and reads best left-aligned; the numbers align right.
        let mut text = format!("{:<w$}", cells[0], w = widths[0]);
        for (cell, width) in cells.iter().zip(&widths).skip(1) {
            let _ = write!(text, "  {cell:>width$}");
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&headers);
    for row in &rows {
        line(&row.iter().map(String::as_str).collect::<Vec<_>>());
    }
    let handoffs: Vec<bool> = history
        .faults
        .iter()
        .filter_map(|f| match f.kind {
            FaultKind::ClientHandoff { extended } => Some(extended),
            _ => None,
        })
        .collect();
    if !handoffs.is_empty() {
        let extended = handoffs.iter().filter(|e| **e).count();
        let _ = writeln!(
            out,
            "handoffs: {} locks handed to another process; {extended} extended by value from a \
             manager without lock-delay, {} not extended (judged as crashes)",
            handoffs.len(),
            handoffs.len() - extended
        );
    }
    if verdict.is_safe() {
        out.push_str("SAFE\n");
    } else {
        let _ = writeln!(out, "VIOLATIONS: {}", verdict.violations);
    }
    out
}

/// Writes a report to `path`, in the format its extension names: `.html`, `.svg` or `.json`.
///
/// # Errors
///
/// If the extension is none of those (`InvalidInput`), or writing the file fails.
pub fn write_report(path: &Path, history: &History, verdict: &Verdict) -> io::Result<()> {
    let extension = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    let contents = match extension.to_ascii_lowercase().as_str() {
        "html" => html(history, verdict)?,
        "svg" => svg(history, verdict),
        "json" => json(history, verdict)?,
        _ => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "report path {} must end in .html, .svg or .json",
                    path.display()
                ),
            ));
        }
    };
    std::fs::write(path, contents)
}

/// The `.json` report; also embedded in the HTML page.
#[derive(Serialize)]
struct Document<'a> {
    history: &'a History,
    verdict: &'a Verdict,
}

fn json(history: &History, verdict: &Verdict) -> io::Result<String> {
    Ok(serde_json::to_string_pretty(&Document {
        history,
        verdict,
    })?)
}

/// A self-contained HTML page: summary, timeline and the data.
fn html(history: &History, verdict: &Verdict) -> io::Result<String> {
    // `</script>` or `<!--` in a value would end or confuse the script element. `<` can only
    // occur inside JSON strings, where `\u003c` means the same thing.
    let data = serde_json::to_string(&Document { history, verdict })?.replace('<', "\\u003c");
    let title = format!(
        "redlock chaos: {} (seed {})",
        history.strategy, history.seed
    );
    Ok(format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{title}</title>\n\
         <style>body{{font-family:sans-serif;margin:1.5em}} pre{{background:#f4f4f4;padding:.8em}} \
         .safe{{color:#080}} .unsafe{{color:#c00}}</style>\n</head>\n<body>\n<h1>{title}</h1>\n\
         <p class=\"{class}\"><b>{status}</b></p>\n<pre>{table}</pre>\n{svg}\n\
         <script type=\"application/json\" id=\"history\">{data}</script>\n</body>\n</html>\n",
        title = escape(&title),
        class = if verdict.is_safe() { "safe" } else { "unsafe" },
        status = if verdict.is_safe() {
            "SAFE".to_owned()
        } else {
            format!("VIOLATIONS: {}", verdict.violations)
        },
        table = escape(&summary_table(verdict, history)),
        svg = svg(history, verdict),
    ))
}

const LABEL_W: f64 = 160.0;
const PLOT_W: f64 = 1000.0;
const TOP: f64 = 40.0;
const ROW_H: f64 = 16.0;
const LANE_GAP: f64 = 10.0;

/// The timeline as a standalone SVG document.
fn svg(history: &History, verdict: &Verdict) -> String {
    let end_us = history
        .sections
        .iter()
        .map(|s| s.exit_us.max(s.valid_until_us))
        .chain(history.faults.iter().map(|f| f.at_us))
        .chain([history.duration_us, 1])
        .max()
        .unwrap_or(1);
    let x = |us: u64| LABEL_W + us as f64 * PLOT_W / end_us as f64;
    let mut body = String::new();
    let mut y = TOP;

    for node in 0..history.nodes {
        label(&mut body, y, &format!("node {node}"));
        for up in history
            .node_up
            .iter()
            .filter(|u| u.node == node && u.to_us > u.from_us)
        {
            let _ = writeln!(
                body,
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"#999\"><title>node {node} up {}</title></rect>",
                x(up.from_us),
                y + 3.0,
                x(up.to_us) - x(up.from_us),
                ROW_H - 6.0,
                span_ms(up.from_us, up.to_us)
            );
        }
        y += ROW_H;
    }

    for resource in &verdict.resources {
        y += LANE_GAP;
        let lane_top = y;
        let sections: Vec<&Section> = history
            .sections
            .iter()
            .filter(|s| s.resource == resource.resource)
            .collect();
        let clients: BTreeSet<u32> = sections.iter().map(|s| s.client).collect();
        let clients: Vec<u32> = clients.into_iter().collect();
        for (row, &client) in clients.iter().enumerate() {
            let row_y = lane_top + row as f64 * ROW_H;
            label(
                &mut body,
                row_y,
                &format!("{} · client {client}", resource.resource),
            );
            for s in sections.iter().filter(|s| s.client == client) {
                section_bar(&mut body, s, row_y, &x, verdict.lock_delay_us);
            }
        }
        let lane_h = clients.len() as f64 * ROW_H;
        // A band across the resource's rows, from `from_us` to `to_us` (at least a pixel).
        let mut band = |class: &str, colour: &str, from_us: u64, to_us: u64, title: String| {
            let _ = writeln!(
                body,
                "<rect class=\"{class}\" x=\"{:.1}\" y=\"{lane_top:.1}\" width=\"{:.1}\" height=\"{lane_h:.1}\" fill=\"{colour}\" fill-opacity=\"0.35\" stroke=\"{colour}\"><title>{title}</title></rect>",
                x(from_us),
                (x(to_us) - x(from_us)).max(1.0),
            );
        };
        for e in &resource.excess {
            let title = format!(
                "OVER PERMITS {}: client {} entered while {} others held",
                span_ms(e.from_us, e.to_us),
                e.entering.client,
                e.holders.len()
            );
            band("excess", "red", e.from_us, e.to_us, title);
        }
        for d in &resource.delay_violations {
            let title = format!(
                "WITHIN THE LOCK-DELAY: client {} entered at {} ms, client {}'s lock was out of reach until {} ms",
                d.next.client,
                format_ms(d.next.enter_us),
                d.unreleased.client,
                format_ms(d.protected_until_us)
            );
            let from = d.unreleased.believed_until_us();
            band("delay-violation", "orange", from, d.next.enter_us, title);
        }
        for o in &resource.overlaps {
            let title = format!(
                "OVERLAP {}: client {} ({}) and client {} ({})",
                span_ms(o.from_us, o.to_us),
                o.first.client,
                escape(&o.first.value),
                o.second.client,
                escape(&o.second.value)
            );
            band("overlap", "red", o.from_us, o.to_us, title);
        }
        y += lane_h;
    }

    let bottom = y + 4.0;
    let shading = no_majority_shading(history, end_us, bottom, &x);
    for fault in &history.faults {
        let fx = x(fault.at_us);
        let _ = writeln!(
            body,
            "<g class=\"fault\"><line x1=\"{fx:.1}\" y1=\"{:.1}\" x2=\"{fx:.1}\" y2=\"{bottom:.1}\" stroke=\"#333\" stroke-dasharray=\"3,3\"/>\
             <text x=\"{fx:.1}\" y=\"{:.1}\" font-size=\"9\" transform=\"rotate(-30 {fx:.1} {:.1})\">{}</text>\
             <title>{} ms: {}</title></g>",
            TOP - 4.0,
            TOP - 6.0,
            TOP - 6.0,
            escape(&fault_label(fault)),
            format_ms(fault.at_us),
            escape(&fault.detail)
        );
    }

    let height = bottom + 20.0;
    let _ = writeln!(
        body,
        "<text x=\"{LABEL_W}\" y=\"{:.1}\" font-size=\"10\">0 ms</text><text x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\" text-anchor=\"end\">{} ms</text>",
        bottom + 14.0,
        LABEL_W + PLOT_W,
        bottom + 14.0,
        format_ms(end_us)
    );
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0}\" height=\"{height:.0}\" font-family=\"sans-serif\">\n{}{body}</svg>\n",
        LABEL_W + PLOT_W + 20.0,
        shading,
    )
}

/// Grey bands, drawn behind everything, over the stretches when no majority of nodes was up.
fn no_majority_shading(
    history: &History,
    end_us: u64,
    bottom: f64,
    x: &impl Fn(u64) -> f64,
) -> String {
    let mut shading = String::new();
    let mut from = 0;
    let until_end = Gap {
        from_us: end_us,
        to_us: end_us,
    };
    for up in majority_up(history.nodes, &history.node_up)
        .iter()
        .chain([&until_end])
    {
        if up.from_us > from {
            let _ = writeln!(
                shading,
                "<rect class=\"no-majority\" x=\"{:.1}\" y=\"{TOP}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"#eee\"><title>no majority of nodes up</title></rect>",
                x(from),
                x(up.from_us) - x(from),
                bottom - TOP
            );
        }
        from = from.max(up.to_us);
    }
    shading
}

fn label(out: &mut String, row_y: f64, text: &str) {
    let _ = writeln!(
        out,
        "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"end\">{}</text>",
        LABEL_W - 6.0,
        row_y + ROW_H - 4.0,
        escape(text)
    );
}

/// One section: solid while believed valid, faded for any time spent past its own deadline; a
/// crash ends it in a black tick, followed by its lock's remaining life as a dashed line.
fn section_bar(
    out: &mut String,
    s: &Section,
    row_y: f64,
    x: &impl Fn(u64) -> f64,
    lock_delay_us: u64,
) {
    let colour = client_colour(s.client);
    let valid_end = s.believed_until_us().max(s.enter_us);
    let permit = s
        .permit
        .map_or_else(String::new, |p| format!(" permit {p}"));
    let end = if s.extended_by_value {
        "handed off, extended by value (valid until the extension's deadline), never released"
            .to_owned()
    } else if s.abandoned {
        "crashed, never released".to_owned()
    } else {
        s.released_us
            .map_or_else(String::new, |r| format!("released at {} ms", format_ms(r)))
    };
    let title = format!(
        "client {}{permit} value {} fence {} · {}, valid until {} ms · write {:?} · {end}",
        s.client,
        s.value,
        s.fence.map_or_else(|| "-".to_owned(), |f| f.to_string()),
        span_ms(s.enter_us, s.exit_us),
        format_ms(s.valid_until_us),
        s.write
    );
    if s.abandoned {
        let mid = row_y + ROW_H / 2.0;
        let _ = writeln!(
            out,
            "<g class=\"abandoned\"><line x1=\"{:.1}\" y1=\"{mid:.1}\" x2=\"{:.1}\" y2=\"{mid:.1}\" stroke=\"#000\" stroke-dasharray=\"2,2\"/>\
             <line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#000\" stroke-width=\"2\"/><title>{}</title></g>",
            x(s.exit_us),
            x(s.valid_until_us
                .saturating_add(lock_delay_us)
                .max(s.exit_us)),
            x(s.exit_us),
            row_y + 1.0,
            x(s.exit_us),
            row_y + ROW_H - 1.0,
            escape(&title)
        );
    }
    let mut rect = |from: u64, to: u64, opacity: f64| {
        let _ = writeln!(
            out,
            "<rect class=\"section\" x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{colour}\" fill-opacity=\"{opacity}\"><title>{}</title></rect>",
            x(from),
            row_y + 2.0,
            (x(to) - x(from)).max(0.5),
            ROW_H - 4.0,
            escape(&title)
        );
    };
    rect(s.enter_us, valid_end, 0.9);
    if s.exit_us > valid_end {
        rect(valid_end, s.exit_us, 0.3);
    }
}

/// Distinct, stable colours: hues spaced by the golden angle.
fn client_colour(client: u32) -> String {
    format!("hsl({:.0},65%,45%)", (f64::from(client) * 137.508) % 360.0)
}

fn fault_label(fault: &FaultEvent) -> String {
    let what = match &fault.kind {
        FaultKind::Kill => "kill".to_owned(),
        FaultKind::Restart { with_data: true } => "restart".to_owned(),
        FaultKind::Restart { with_data: false } => "restart (empty)".to_owned(),
        FaultKind::Pause => "pause".to_owned(),
        FaultKind::Resume => "resume".to_owned(),
        FaultKind::Delay { ms } => format!("delay {ms} ms"),
        FaultKind::DropConnections => "drop conns".to_owned(),
        FaultKind::Heal => "heal".to_owned(),
        FaultKind::ClientPause { ms } => format!("pause {ms} ms"),
        FaultKind::ClientCrash => "crash".to_owned(),
        FaultKind::ClientHandoff { extended: true } => "handoff".to_owned(),
        FaultKind::ClientHandoff { extended: false } => "handoff (not extended)".to_owned(),
        FaultKind::Partition => "partition".to_owned(),
        FaultKind::Failover => "failover".to_owned(),
        FaultKind::Failback => "failback".to_owned(),
        FaultKind::Flush => "flush".to_owned(),
        FaultKind::Replace { back: false } => "replace".to_owned(),
        FaultKind::Replace { back: true } => "put back".to_owned(),
        FaultKind::Blackhole => "blackhole".to_owned(),
        FaultKind::ReplicationCut => "replication cut".to_owned(),
    };
    match (fault.node, fault.client) {
        (Some(n), _) => format!("{what} n{n}"),
        (None, Some(c)) => format!("{what} c{c}"),
        (None, None) => what,
    }
}

/// Milliseconds with one decimal, truncated.
fn format_ms(us: u64) -> String {
    format!("{}.{}", us / 1000, us % 1000 / 100)
}

/// A stretch of time in a title: `1.5–2.0 ms`.
fn span_ms(from_us: u64, to_us: u64) -> String {
    format!("{}–{} ms", format_ms(from_us), format_ms(to_us))
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::check;
    use crate::history::{NodeUp, WriteOutcome};

    fn sec(resource: &str, client: u32, value: &str, enter: u64, exit: u64) -> Section {
        Section {
            resource: resource.to_owned(),
            client,
            value: value.to_owned(),
            fence: None,
            enter_us: enter,
            exit_us: exit,
            valid_until_us: exit,
            write: WriteOutcome::Unfenced,
            permit: None,
            released_us: None,
            abandoned: false,
            extended_by_value: false,
            shared: false,
        }
    }

    fn history(sections: Vec<Section>) -> History {
        History {
            strategy: "redlock".to_owned(),
            seed: 42,
            nodes: 3,
            clients: 2,
            duration_us: 1_000_000,
            sections,
            faults: vec![FaultEvent {
                at_us: 300_000,
                node: Some(1),
                client: None,
                kind: FaultKind::Kill,
                detail: "SIGKILL <pid 7>".to_owned(),
            }],
            node_up: vec![
                NodeUp {
                    node: 0,
                    from_us: 0,
                    to_us: 1_000_000,
                },
                NodeUp {
                    node: 1,
                    from_us: 0,
                    to_us: 300_000,
                },
                NodeUp {
                    node: 2,
                    from_us: 0,
                    to_us: 600_000,
                },
            ],
            permits: None,
            lock_delay_us: 0,
            late_joins: 0,
        }
    }

    fn overlapping() -> History {
        history(vec![
            sec("orders", 0, "a", 0, 200_000),
            sec("orders", 1, "b", 150_000, 400_000),
            sec("users", 1, "c", 0, 100_000),
        ])
    }

    fn disjoint() -> History {
        history(vec![
            sec("orders", 0, "a", 0, 200_000),
            sec("orders", 1, "b", 250_000, 400_000),
        ])
    }

    #[test]
    fn table_lists_each_resource_and_the_verdict() {
        let h = overlapping();
        let table = summary_table(&check(&h), &h);
        let expected = "\
strategy redlock, seed 42, 3 nodes, 2 clients, 1000.0 ms
resource  sections  overlaps  stale rejected  token violations  longest gap ms
orders           2         1               0                 0               -
users            1         0               0                 0               -
VIOLATIONS: 1
";
        assert_eq!(table, expected);

        let h = disjoint();
        let table = summary_table(&check(&h), &h);
        assert!(
            table.contains(
                "\norders           2         0               0                 0            50.0\n"
            ),
            "{table}"
        );
        assert!(table.ends_with("\nSAFE\n"), "{table}");
    }

    #[test]
    fn a_semaphore_run_with_a_lock_delay_shows_its_columns() {
        let mut h = history(vec![
            sec("orders", 0, "a", 0, 200_000),
            sec("orders", 1, "b", 50_000, 200_000),
            sec("orders", 2, "c", 100_000, 150_000),
            Section {
                abandoned: true,
                extended_by_value: false,
                shared: false,
                permit: Some(0),
                ..sec("users", 0, "d", 0, 100_000)
            },
            Section {
                permit: Some(0),
                ..sec("users", 1, "e", 150_000, 160_000)
            },
        ]);
        h.permits = Some(2);
        h.lock_delay_us = 100_000;
        let verdict = check(&h);
        let table = summary_table(&verdict, &h);
        let expected = "\
strategy redlock, seed 42, 3 nodes, 2 clients, 1000.0 ms, 2 permits, lock-delay 100.0 ms
resource  sections  overlaps  stale rejected  token violations  most holders  over permits  unreleased  delay violations  longest gap ms
orders           3         0               0                 0             3             1           0                 0               -
users            2         0               0                 0             1             0           1                 1            50.0
VIOLATIONS: 2
";
        assert_eq!(table, expected);
        let checked = crate::checker::check_with(&h, 0);
        assert!(
            summary_table(&checked, &h).starts_with(
                "strategy redlock, seed 42, 3 nodes, 2 clients, 1000.0 ms, 2 permits, lock-delay 100.0 ms (checked against 0.0 ms)\n"
            ),
            "{}",
            summary_table(&checked, &h)
        );
        let svg = svg(&h, &verdict);
        assert_eq!(svg.matches("class=\"excess\"").count(), 1, "{svg}");
        assert_eq!(svg.matches("class=\"delay-violation\"").count(), 1, "{svg}");
        assert_eq!(svg.matches("class=\"abandoned\"").count(), 1, "{svg}");
        assert!(svg.contains("crashed, never released"), "{svg}");
        assert!(svg.contains(" permit 0 value d"), "{svg}");
    }

    #[test]
    fn handoffs_are_counted_under_the_rows_and_drawn_as_abandoned() {
        let mut h = history(vec![
            Section {
                abandoned: true,
                extended_by_value: true,
                valid_until_us: 500_000,
                ..sec("orders", 0, "a", 0, 100_000)
            },
            sec("orders", 1, "b", 700_000, 800_000),
        ]);
        h.lock_delay_us = 100_000;
        for (at_us, extended) in [(100_000, true), (900_000, false)] {
            h.faults.push(FaultEvent {
                at_us,
                node: None,
                client: Some(0),
                kind: FaultKind::ClientHandoff { extended },
                detail: String::new(),
            });
        }
        let verdict = check(&h);
        assert!(verdict.is_safe(), "{verdict:?}");
        let table = summary_table(&verdict, &h);
        assert!(
            table.ends_with(
                "handoffs: 2 locks handed to another process; 1 extended by value from a manager \
                 without lock-delay, 1 not extended (judged as crashes)\nSAFE\n"
            ),
            "{table}"
        );
        assert!(
            !summary_table(&check(&disjoint()), &disjoint()).contains("handoffs"),
            "a run without handoffs says nothing of them"
        );
        let svg = svg(&h, &verdict);
        assert_eq!(svg.matches("class=\"abandoned\"").count(), 1, "{svg}");
        assert!(svg.contains("handed off, extended by value"), "{svg}");
        assert!(svg.contains(">handoff c0<"), "{svg}");
        assert!(svg.contains(">handoff (not extended) c0<"), "{svg}");
    }

    #[test]
    fn svg_marks_overlaps_in_red_only_when_there_are_some() {
        let h = overlapping();
        let svg = svg(&h, &check(&h));
        assert_eq!(svg.matches("class=\"overlap\"").count(), 1, "{svg}");
        assert!(svg.contains("fill=\"red\""));
        // Two clients on "orders", one on "users"; three node rows; one fault; no majority after 0.6 s.
        assert!(
            svg.contains("orders · client 0")
                && svg.contains("orders · client 1")
                && svg.contains("users · client 1")
        );
        assert_eq!(svg.matches("class=\"section\"").count(), 3);
        assert!(svg.contains("node 2"));
        assert!(svg.contains(">kill n1</text>"));
        assert!(
            svg.contains("SIGKILL &lt;pid 7&gt;"),
            "fault detail is escaped"
        );
        assert_eq!(svg.matches("class=\"no-majority\"").count(), 1);

        let h = disjoint();
        let svg = super::svg(&h, &check(&h));
        assert!(!svg.contains("class=\"overlap\""), "{svg}");
        assert!(!svg.contains("fill=\"red\""), "{svg}");
    }

    #[test]
    fn time_past_the_deadline_is_drawn_faded() {
        let late = Section {
            valid_until_us: 100_000,
            ..sec("r", 0, "a", 0, 200_000)
        };
        let h = history(vec![late]);
        let svg = svg(&h, &check(&h));
        assert_eq!(svg.matches("class=\"section\"").count(), 2, "{svg}");
        assert!(svg.contains("fill-opacity=\"0.3\""));
    }

    #[test]
    fn html_is_self_contained_and_carries_the_data() {
        let mut h = overlapping();
        h.sections[2].value = "</script><script>alert(1)</script>".to_owned();
        let verdict = check(&h);
        let page = html(&h, &verdict).expect("renders");
        assert!(page.contains("<svg") && page.contains("class=\"overlap\""));
        assert!(page.contains("VIOLATIONS: 1"));
        assert!(
            !page.contains("src=") && !page.contains("href="),
            "no external resources"
        );
        assert_eq!(
            page.matches("</script>").count(),
            1,
            "a value cannot close the data block"
        );

        let start = page
            .find(r#"<script type="application/json" id="history">"#)
            .expect("data block");
        let data = &page[start..];
        let data =
            &data[data.find('>').expect("tag end") + 1..data.find("</script>").expect("block end")];
        let parsed: serde_json::Value = serde_json::from_str(data).expect("embedded JSON parses");
        let round_trip: History =
            serde_json::from_value(parsed["history"].clone()).expect("is a history");
        assert_eq!(round_trip, h);
        assert_eq!(parsed["verdict"]["violations"], 1);
    }

    #[test]
    fn write_report_picks_the_format_from_the_extension() {
        let dir = tempfile::tempdir().expect("temp dir");
        let h = overlapping();
        let verdict = check(&h);
        for (name, start) in [
            ("r.html", "<!DOCTYPE html>"),
            ("r.svg", "<svg"),
            ("r.json", "{"),
        ] {
            let path = dir.path().join(name);
            write_report(&path, &h, &verdict).expect("writes");
            let written = std::fs::read_to_string(&path).expect("reads back");
            assert!(written.starts_with(start), "{name}: {written}");
        }
        let json: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.path().join("r.json")).expect("reads"),
        )
        .expect("parses");
        assert_eq!(json["verdict"]["violations"], 1);
        assert_eq!(json["history"]["seed"], 42);

        let err =
            write_report(&dir.path().join("r.txt"), &h, &verdict).expect_err("unknown extension");
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(!dir.path().join("r.txt").exists());
    }
}
