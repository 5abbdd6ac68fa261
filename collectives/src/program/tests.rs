//! Unit tests of the program IR: validation accepts well-formed programs and rejects each kind
//! of malformed one, channels are FIFO per `(src, dst, channel)`, the builder derives minimal
//! hazard dependencies, and steps serialize flat with an `op` tag.

use super::validation::check_races;
use super::*;

fn c(offset: usize, len: usize) -> ChunkRange {
    ChunkRange::new(offset, len)
}

fn step(id: usize, deps: &[usize], kind: StepKind) -> Step {
    Step {
        id: StepId(id),
        deps: deps.iter().map(|&d| StepId(d)).collect(),
        kind,
    }
}

fn prog(rank: usize, len: usize, steps: Vec<Step>) -> Program {
    Program {
        rank,
        buffer_len: len,
        input: c(0, len),
        output: c(0, len),
        steps,
    }
}

fn send(peer: usize, chunk: ChunkRange) -> StepKind {
    StepKind::Send {
        peer,
        chunk,
        channel: 0,
    }
}

fn recv(peer: usize, chunk: ChunkRange) -> StepKind {
    StepKind::Recv {
        peer,
        chunk,
        reduce: true,
        channel: 0,
    }
}

/// Rank 0 sends [0..2) to rank 1, which adds it in.
fn pair() -> Vec<Program> {
    vec![
        prog(0, 4, vec![step(0, &[], send(1, c(0, 2)))]),
        prog(1, 4, vec![step(0, &[], recv(0, c(0, 2)))]),
    ]
}

#[test]
fn accepts_a_simple_pair() {
    assert_eq!(validate(&pair()), Ok(()));
}

#[test]
fn rejects_dangling_dep() {
    let mut p = pair();
    p[1].steps[0].deps.push(StepId(7));
    assert_eq!(
        validate(&p),
        Err(ValidationError::DanglingDep {
            rank: 1,
            step: StepId(0),
            dep: StepId(7)
        })
    );
}

#[test]
fn rejects_forward_and_self_dep() {
    let mut p = pair();
    p[0].steps.push(step(1, &[], send(1, c(2, 2))));
    p[1].steps.push(step(1, &[], recv(0, c(2, 2))));
    assert_eq!(validate(&p), Ok(()));
    p[0].steps[0].deps.push(StepId(1));
    assert!(matches!(
        validate(&p),
        Err(ValidationError::ForwardDep { rank: 0, .. })
    ));
    p[0].steps[0].deps = vec![StepId(0)];
    assert!(matches!(
        validate(&p),
        Err(ValidationError::ForwardDep { rank: 0, .. })
    ));
}

#[test]
fn rejects_unmatched_send_and_recv() {
    let mut p = pair();
    p[1].steps.clear();
    assert_eq!(
        validate(&p),
        Err(ValidationError::UnmatchedSend {
            src: 0,
            dst: 1,
            channel: 0,
            step: StepId(0),
            index: 0
        })
    );
    let mut p = pair();
    p[0].steps.clear();
    assert_eq!(
        validate(&p),
        Err(ValidationError::UnmatchedRecv {
            src: 0,
            dst: 1,
            channel: 0,
            step: StepId(0),
            index: 0
        })
    );
}

#[test]
fn rejects_length_mismatch() {
    let mut p = pair();
    p[1].steps[0].kind = recv(0, c(0, 3));
    assert!(matches!(
        validate(&p),
        Err(ValidationError::LengthMismatch {
            send_len: 2,
            recv_len: 3,
            ..
        })
    ));
}

#[test]
fn channels_are_fifo_in_program_order() {
    // Rank 0 sends 1 then 3 elements; rank 1 receives 3 then 1: lengths line up only out of
    // order, which FIFO channels forbid.
    let p = vec![
        prog(
            0,
            4,
            vec![
                step(0, &[], send(1, c(0, 1))),
                step(1, &[], send(1, c(1, 3))),
            ],
        ),
        prog(
            1,
            4,
            vec![
                step(0, &[], recv(0, c(0, 3))),
                step(1, &[], recv(0, c(3, 1))),
            ],
        ),
    ];
    assert!(matches!(
        validate(&p),
        Err(ValidationError::LengthMismatch { index: 0, .. })
    ));
}

#[test]
fn channels_are_independent_queues() {
    // Rank 0 sends 1 element on channel 0, then 3 on channel 1; rank 1 takes channel 1's
    // message first. Matching is per (src, dst, channel), so this is well formed, and the
    // interpreter delivers each message to the receive on its channel.
    let p = vec![
        prog(
            0,
            4,
            vec![
                step(
                    0,
                    &[],
                    StepKind::Send {
                        peer: 1,
                        chunk: c(0, 1),
                        channel: 0,
                    },
                ),
                step(
                    1,
                    &[],
                    StepKind::Send {
                        peer: 1,
                        chunk: c(1, 3),
                        channel: 1,
                    },
                ),
            ],
        ),
        prog(
            1,
            4,
            vec![
                step(
                    0,
                    &[],
                    StepKind::Recv {
                        peer: 0,
                        chunk: c(1, 3),
                        reduce: false,
                        channel: 1,
                    },
                ),
                step(
                    1,
                    &[],
                    StepKind::Recv {
                        peer: 0,
                        chunk: c(0, 1),
                        reduce: false,
                        channel: 0,
                    },
                ),
            ],
        ),
    ];
    assert_eq!(validate(&p), Ok(()));
    let out = crate::interpret::run_local(&p, vec![vec![1, 2, 3, 4], vec![0; 4]]).unwrap();
    assert_eq!(out[1], [1, 2, 3, 4]);
    // The same message on the wrong channel is unmatched.
    let mut wrong = p.clone();
    wrong[1].steps[0].kind = StepKind::Recv {
        peer: 0,
        chunk: c(1, 3),
        reduce: false,
        channel: 2,
    };
    assert!(matches!(
        validate(&wrong),
        Err(ValidationError::UnmatchedSend {
            channel: 1,
            index: 0,
            ..
        })
    ));
}

#[test]
fn channel_defaults_to_zero_in_json() {
    let s: Step = serde_json::from_str(
        r#"{"id": 0, "op": "recv", "peer": 1, "chunk": {"offset": 0, "len": 1}, "reduce": false}"#,
    )
    .unwrap();
    assert_eq!(s.kind.channel(), Some((1, 0)));
    let on3 = step(
        0,
        &[],
        StepKind::Send {
            peer: 2,
            chunk: c(0, 1),
            channel: 3,
        },
    );
    let json = serde_json::to_value(&on3).unwrap();
    assert_eq!(json["channel"], 3);
    assert_eq!(serde_json::from_value::<Step>(json).unwrap(), on3);
}

#[test]
fn rejects_bad_peers_ranks_and_ranges() {
    let mut p = pair();
    p[0].steps[0].kind = send(5, c(0, 2));
    assert!(matches!(
        validate(&p),
        Err(ValidationError::PeerOutOfRange {
            peer: 5,
            nranks: 2,
            ..
        })
    ));
    let mut p = pair();
    p[0].steps[0].kind = send(0, c(0, 2));
    assert!(matches!(
        validate(&p),
        Err(ValidationError::SelfPeer { rank: 0, .. })
    ));
    let mut p = pair();
    p[1].rank = 0;
    assert!(matches!(
        validate(&p),
        Err(ValidationError::RankMismatch { index: 1, rank: 0 })
    ));
    let mut p = pair();
    p[0].steps[0].kind = send(1, c(3, 2));
    assert!(matches!(
        validate(&p),
        Err(ValidationError::ChunkOutOfBuffer { rank: 0, .. })
    ));
    let mut p = pair();
    p[0].output = c(usize::MAX, 2);
    assert!(matches!(
        validate(&p),
        Err(ValidationError::IoOutOfBuffer {
            which: "output",
            ..
        })
    ));
    let mut p = pair();
    p[0].steps[0].id = StepId(3);
    assert!(matches!(
        validate(&p),
        Err(ValidationError::StepIdMismatch { index: 0, .. })
    ));
}

#[test]
fn rejects_bad_copies() {
    let p = vec![prog(
        0,
        4,
        vec![step(
            0,
            &[],
            StepKind::Copy {
                src: c(0, 2),
                dst: c(2, 1),
                reduce: false,
            },
        )],
    )];
    assert!(matches!(
        validate(&p),
        Err(ValidationError::CopyLengthMismatch { .. })
    ));
    let p = vec![prog(
        0,
        4,
        vec![step(
            0,
            &[],
            StepKind::Copy {
                src: c(0, 2),
                dst: c(1, 2),
                reduce: false,
            },
        )],
    )];
    assert!(matches!(
        validate(&p),
        Err(ValidationError::CopyOverlap { .. })
    ));
}

#[test]
fn rejects_unordered_conflicts() {
    // Rank 1 receives into [0..2) and sends [1..3) with no dependency: a race.
    let mut p = pair();
    p[1].steps.push(step(1, &[], send(0, c(1, 2))));
    p[0].steps.push(step(1, &[], recv(1, c(2, 2))));
    assert_eq!(
        validate(&p),
        Err(ValidationError::Race {
            rank: 1,
            first: StepId(0),
            second: StepId(1)
        })
    );
    p[1].steps[1].deps.push(StepId(0));
    assert_eq!(validate(&p), Ok(()));
}

#[test]
fn builder_derives_minimal_hazard_deps() {
    let mut b = ProgramBuilder::new(0, 6, c(0, 6), c(0, 6));
    let s0 = b.send(1, c(0, 2)); // reads [0..2)
    let s1 = b.send(2, c(0, 2)); // read/read: independent
    let r2 = b.recv(1, c(0, 2), true); // WAR on s0 and s1
    let s3 = b.send(1, c(0, 1)); // RAW on r2 (s0, s1 implied)
    let r4 = b.recv(2, c(4, 2), false); // touches nothing earlier
    let c5 = b.copy(c(4, 2), c(2, 2)); // RAW on r4
    let x6 = b.push(send(2, c(3, 1)), &[s3]); // RAW on c5, plus explicit s3
    let p = b.finish();
    let deps = |id: StepId| p.steps[id.0].deps.clone();
    assert!(deps(s0).is_empty() && deps(s1).is_empty());
    assert_eq!(deps(r2), [s0, s1]);
    assert_eq!(deps(s3), [r2]);
    assert!(deps(r4).is_empty());
    assert_eq!(deps(c5), [r4]);
    assert_eq!(deps(x6), [s3, c5]);
    assert!(check_races(&p).is_ok());
}

#[test]
fn step_serializes_flat_with_op_tag() {
    let s = step(2, &[0, 1], recv(3, c(4, 5)));
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "id": 2, "deps": [0, 1], "op": "recv", "peer": 3,
            "chunk": {"offset": 4, "len": 5}, "reduce": true
        })
    );
    let back: Step = serde_json::from_value(json).unwrap();
    assert_eq!(back, s);
    let no_deps: Step = serde_json::from_str(
        r#"{"id": 0, "op": "send", "peer": 1, "chunk": {"offset": 0, "len": 1}}"#,
    )
    .unwrap();
    assert!(no_deps.deps.is_empty());
}
