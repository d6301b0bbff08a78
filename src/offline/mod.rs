//! What reads recordings after the fact: `check` as a CI gate (`gate`; its SARIF in `sarif`),
//! what a session costs an agent's context (`cost`),
//! what changed between two sessions (`diff`), and the recordings served to an AI agent (`agent`). The checks themselves
//! are the live inspector's (`inspect::offline`, `inspect::recorded`); regression runs and mocks
//! are `replay`'s; the servers' trusted tools (`crate::baseline`) are read live too.

pub mod agent;
pub mod cost;
pub mod diff;
pub mod gate;
pub mod sarif;

use crate::events::{CallEvent, Outcome};

/// A multi round-trip call's time (MCP 2026-07-28): the rounds that asked for input, oldest
/// first, then the call itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rounds {
    /// How many rounds (1: an ordinary call).
    pub rounds: usize,
    /// The server's time: each round's request to its reply, summed.
    pub server_us: u64,
    /// The first round's request to the last reply: the server's time and the client's (a human
    /// answering an elicitation) between rounds.
    pub wall_us: u64,
}

impl Rounds {
    /// The time spent on the client's side, between rounds.
    pub fn client_us(&self) -> u64 {
        self.wall_us.saturating_sub(self.server_us)
    }
}

/// The rounds of `calls[i]`: the `input_required` calls it `continues`, back to the first (same
/// scope group and direction; at most 64 rounds).
pub fn rounds_of(calls: &[&CallEvent], i: usize) -> Rounds {
    let c = calls[i];
    let end = c.ts;
    let lat = |c: &CallEvent| c.latency_us.unwrap_or(0);
    let mut out = Rounds {
        rounds: 1,
        server_us: lat(c),
        wall_us: lat(c),
    };
    let mut start = end.saturating_sub(lat(c) * 1000);
    let mut prev = c.continues.clone();
    let mut before = i;
    while let Some(id) = prev.take() {
        let Some(j) = calls[..before].iter().rposition(|x| {
            x.id == id
                && x.outcome == Outcome::InputRequired
                && x.direction == c.direction
                && x.scope.report_key() == c.scope.report_key()
        }) else {
            break;
        };
        let r = calls[j];
        out.rounds += 1;
        out.server_us += lat(r);
        start = r.ts.saturating_sub(lat(r) * 1000);
        prev = r.continues.clone();
        before = j;
        if out.rounds >= 64 {
            break;
        }
    }
    out.wall_us = end.saturating_sub(start) / 1000;
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{Direction, Scope};
    use crate::rpc::Id;

    fn call(
        id: u32,
        outcome: Outcome,
        end_ms: u64,
        took_ms: u64,
        continues: Option<u32>,
    ) -> CallEvent {
        CallEvent {
            ts: end_ms * 1_000_000,
            exchange: u64::from(id),
            scope: Scope::Stateless {
                group: "stateless:c/1@127.0.0.1".into(),
                exchange: u64::from(id),
            },
            direction: Direction::ClientToServer,
            method: "tools/call".into(),
            target: Some("deploy".into()),
            id: Id::Num(id.to_string().into()),
            outcome,
            latency_us: Some(took_ms * 1000),
            anomalies: vec![],
            request_index: None,
            response_index: None,
            continues: continues.map(|c| Id::Num(c.to_string().into())),
            task: None,
            context: None,
            trace: None,
        }
    }

    /// A call that asked for input (100 ms of the server's), a human who took 5 s to answer,
    /// and the retry (200 ms): the server's time is 0.3 s, the wall time 5.3 s — and the gate's
    /// `--max-duration` judges the first, `--max-wall-duration` the second.
    #[test]
    fn a_multi_round_call_splits_the_servers_time_from_the_clients() {
        let calls = [
            call(1, Outcome::InputRequired, 1000, 100, None),
            call(2, Outcome::Result, 6200, 200, Some(1)),
        ];
        let refs: Vec<&CallEvent> = calls.iter().collect();
        let r = rounds_of(&refs, 1);
        assert_eq!(
            (r.rounds, r.server_us, r.wall_us, r.client_us()),
            (2, 300_000, 5_300_000, 5_000_000)
        );
        assert_eq!(rounds_of(&refs, 0).rounds, 1);
        let mut gate = gate::Gate::default();
        gate.max_duration = Some(std::time::Duration::from_secs(1));
        gate.max_wall_duration = Some(std::time::Duration::from_secs(1));
        let report = gate::evaluate(&gate, "t".into(), Vec::new(), &refs);
        let verdicts: Vec<(String, bool, String)> = report
            .assertions
            .iter()
            .map(|a| (a.name.clone(), a.passed, a.message.clone()))
            .collect();
        assert_eq!(verdicts[0].0, "max-duration 1s");
        assert!(verdicts[0].1, "{verdicts:?}");
        assert_eq!(verdicts[1].0, "max-wall-duration 1s");
        assert!(!verdicts[1].1);
        assert!(
            verdicts[1].2.contains(
                "took 5.300 s over 2 rounds (0.300 s the server's, 5.000 s waiting on the client)"
            ),
            "{verdicts:?}"
        );
        gate.max_wall_duration = None;
        assert_eq!(
            gate::evaluate(&gate, "t".into(), Vec::new(), &refs)
                .assertions
                .len(),
            1
        );
    }
}
