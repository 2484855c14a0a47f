//! The longest gaps between two output lines of a run.
//!
//! A run is watched live (each line stamped as it arrives, [`Stamped`]) or read back from the log such a watch
//! wrote (one line per output line: `[+SECONDS] TEXT`, [`format_line`] / [`parse_line`]). The gap before the
//! first line is counted from the start of the watch: a run that is silent from its start is silent too.

use std::fmt::Write as _;

/// One output line and when it arrived, in seconds since the watch started.
#[derive(Clone, Debug, PartialEq)]
pub struct Stamped {
    /// Seconds since the start.
    pub at: f64,
    /// The line, without its newline.
    pub text: String,
}

/// A silence: the time between the end of line `after` (or the start) and line `before`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Gap {
    /// Its length in seconds.
    pub secs: f64,
    /// Index of the line before it; `None` when the gap begins at the start of the watch.
    pub after: Option<usize>,
    /// Index of the line that ended it.
    pub before: usize,
}

/// The `top` longest gaps of `lines`, longest first (equal gaps: earlier first).
pub fn longest(lines: &[Stamped], top: usize) -> Vec<Gap> {
    let mut gaps: Vec<Gap> = lines
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let since = if i == 0 { 0.0 } else { lines[i - 1].at };
            Gap {
                secs: (l.at - since).max(0.0),
                after: i.checked_sub(1),
                before: i,
            }
        })
        .collect();
    gaps.sort_by(|a, b| b.secs.total_cmp(&a.secs).then(a.before.cmp(&b.before)));
    gaps.truncate(top);
    gaps
}

/// A line of the watch's log: `[+SECONDS] TEXT`, seconds with millisecond precision.
pub fn format_line(line: &Stamped) -> String {
    format!("[+{:.3}] {}", line.at, line.text)
}

/// A line of a log [`format_line`] wrote; `None` for anything else.
pub fn parse_line(s: &str) -> Option<Stamped> {
    let rest = s.strip_prefix("[+")?;
    let (secs, text) = rest
        .split_once("] ")
        .or_else(|| rest.strip_suffix(']').map(|secs| (secs, "")))?;
    Some(Stamped {
        at: secs.parse().ok()?,
        text: text.to_string(),
    })
}

/// The report printed at the end of a watch: the number of lines, the run's length, and each of `gaps` with the
/// lines on both sides (cut to 160 characters).
pub fn report(lines: &[Stamped], gaps: &[Gap], end: f64) -> String {
    let cut = |s: &str| s.chars().take(160).collect::<String>();
    let mut out = format!(
        "longest-gap: {} lines in {:.1} s; the {} longest gaps between two lines:\n",
        lines.len(),
        end,
        gaps.len()
    );
    for g in gaps {
        let _ = writeln!(out, "  {:7.1} s", g.secs);
        match g.after {
            Some(a) => {
                let _ = writeln!(
                    out,
                    "      after  line {} (+{:.1} s): {}",
                    a + 1,
                    lines[a].at,
                    cut(&lines[a].text)
                );
            }
            None => {
                let _ = writeln!(out, "      after  the start");
            }
        }
        let b = &lines[g.before];
        let _ = writeln!(
            out,
            "      before line {} (+{:.1} s): {}",
            g.before + 1,
            b.at,
            cut(&b.text)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(times: &[f64]) -> Vec<Stamped> {
        times
            .iter()
            .enumerate()
            .map(|(i, &at)| Stamped {
                at,
                text: format!("line {}", i + 1),
            })
            .collect()
    }

    #[test]
    fn the_longest_gap_comes_first_with_the_lines_around_it() {
        let lines = run(&[1.0, 2.0, 47.5, 48.0, 80.0]);
        let gaps = longest(&lines, 2);
        assert_eq!(
            gaps,
            vec![
                Gap {
                    secs: 45.5,
                    after: Some(1),
                    before: 2
                },
                Gap {
                    secs: 32.0,
                    after: Some(3),
                    before: 4
                },
            ]
        );
        let r = report(&lines, &gaps, 81.0);
        assert!(
            r.starts_with("longest-gap: 5 lines in 81.0 s; the 2 longest gaps"),
            "{r}"
        );
        assert!(
            r.contains(
                "   45.5 s\n      after  line 2 (+2.0 s): line 2\n      before line 3 (+47.5 s): line 3\n"
            ),
            "{r}"
        );
    }

    #[test]
    fn a_silent_start_counts_as_a_gap() {
        let lines = run(&[90.0, 91.0]);
        assert_eq!(
            longest(&lines, 1),
            vec![Gap {
                secs: 90.0,
                after: None,
                before: 0
            }]
        );
        assert!(report(&lines, &longest(&lines, 1), 91.0).contains("after  the start"));
    }

    #[test]
    fn no_lines_give_no_gaps() {
        assert!(longest(&[], 5).is_empty());
    }

    #[test]
    fn a_log_line_reads_back_as_it_was_written() {
        let l = Stamped {
            at: 12.345,
            text: "[real-quickstart 10:31:02]   .. 30s: x | y".into(),
        };
        assert_eq!(parse_line(&format_line(&l)), Some(l));
        assert_eq!(
            parse_line("[+3.000] "),
            Some(Stamped {
                at: 3.0,
                text: String::new()
            })
        );
        assert_eq!(
            parse_line("[+3.000]"),
            Some(Stamped {
                at: 3.0,
                text: String::new()
            })
        );
        assert_eq!(parse_line("no stamp"), None);
        assert_eq!(parse_line("[+x] text"), None);
    }
}
