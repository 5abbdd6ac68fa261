//! The training section's lines in the text summary.

use super::TrainingReport;

/// Summary lines for the training section.
pub fn summary(t: &TrainingReport) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let us = |ps: u64| ps as f64 / 1e6;
    let _ = writeln!(
        s,
        "Training: {} ranks from {}; {} {}",
        t.ranks,
        t.traces,
        if t.iterations_ps.len() > 1 {
            "time of all iterations"
        } else {
            "iteration time"
        },
        t.iteration_time_us
            .map_or_else(|| "- (did not finish)".to_string(), |x| format!("{x:.3}us"))
    );
    if t.iterations_ps.len() > 1 {
        let _ = writeln!(
            s,
            "          {} iterations: {}; mean {:.3}us",
            t.iterations_ps.len(),
            t.iterations_ps
                .iter()
                .map(|&p| format!("{:.3}us", us(p)))
                .collect::<Vec<_>>()
                .join(", "),
            us(t.mean_iteration_ps.unwrap_or(0))
        );
    }
    let o = &t.overall;
    let total = (o.compute_ps + o.exposed_comm_ps + o.idle_ps).max(1) as f64;
    let _ = writeln!(
        s,
        "          over all ranks: compute {:.3}us ({:.1}%), exposed communication {:.3}us ({:.1}%), idle {:.3}us ({:.1}%); communication hidden under compute {:.3}us",
        us(o.compute_ps),
        o.compute_ps as f64 / total * 100.0,
        us(o.exposed_comm_ps),
        o.exposed_comm_ps as f64 / total * 100.0,
        us(o.idle_ps),
        o.idle_ps as f64 / total * 100.0,
        us(o.hidden_comm_ps),
    );
    if !t.exposed_by_kind.is_empty() {
        let _ = writeln!(
            s,
            "          exposed communication by kind: {}",
            t.exposed_by_kind
                .iter()
                .map(|k| format!(
                    "{} {:.3}us ({:.1}%)",
                    k.kind,
                    us(k.exposed_ps),
                    k.exposed_ps as f64 / total * 100.0
                ))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if let Some(m) = &t.model {
        let _ = writeln!(
            s,
            "          model: {:.3}B parameters, {} tokens per iteration; {:.0} tokens/s, {:.1} TFLOP/s per GPU{}",
            m.parameters / 1e9,
            m.tokens_per_iteration,
            m.tokens_per_s,
            m.tflops_per_gpu,
            m.mfu
                .map_or_else(String::new, |x| format!(", MFU {:.1}%", x * 100.0))
        );
        let _ = writeln!(
            s,
            "          memory per GPU: {:.1} GiB (stage {}){}",
            m.memory_per_gpu / (1u64 << 30) as f64,
            m.memory_peak_stage,
            match m.fits_device {
                Some(true) => ", fits the device",
                Some(false) => ": DOES NOT FIT the device's memory",
                None => "",
            }
        );
    }
    for k in &t.collective_kinds {
        let _ = writeln!(
            s,
            "          {}: {} collectives, {} B, {:.3}us{}",
            k.op,
            k.count,
            k.bytes,
            k.time_us,
            k.busbw_gbps
                .map_or_else(String::new, |b| format!(", mean busbw {b:.2} GB/s"))
        );
    }
    if let Some(c) = &t.critical_path {
        let _ = writeln!(
            s,
            "          critical path (ends on rank {}, through {} ranks): {} nodes, compute {:.3}us, communication {:.3}us; longest: {}",
            c.rank,
            c.ranks,
            c.nodes,
            us(c.compute_ps),
            us(c.comm_ps),
            c.top
                .iter()
                .map(|p| format!(
                    "rank {} node {} {} {:.3}us",
                    p.rank,
                    p.node,
                    p.name,
                    us(p.time_ps)
                ))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let _ = writeln!(
            s,
            "          critical path by kind: {}",
            c.by_name
                .iter()
                .map(|g| format!("{} x{} {:.3}us", g.name, g.count, us(g.time_ps)))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if t.communicators.len() > 1 {
        // A large model has hundreds of groups: the first few, then the JSON has them all.
        const SHOWN: usize = 12;
        for g in t.communicators.iter().take(SHOWN) {
            let _ = writeln!(
                s,
                "          group {} ({} ranks): {} collectives, {} B, {:.3}us",
                g.group, g.ranks, g.count, g.bytes, g.time_us
            );
        }
        if t.communicators.len() > SHOWN {
            let _ = writeln!(
                s,
                "          ... and {} more groups (the JSON report's training.communicators)",
                t.communicators.len() - SHOWN
            );
        }
    }
    s
}
