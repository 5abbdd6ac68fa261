//! What the runner puts in its immediates and timer tokens, encoded and decoded here alone.
//!
//! Both carry the collectives' prefix ([`APP`], the top bit) so that the host's dispatcher
//! hands them to the runner. An immediate's other 31 bits are the job (20 bits, so a runner
//! holds up to a million collectives) and the channel (11 bits: a job's channels are its
//! chunks times one or two, and MSCCL's at most 32). A token's other 61 bits say which job to
//! begin, or which job's step a finished reduction completes.

use fabemu_fabric::transport::AppId;

/// The collectives' prefix of their host's timer tokens and immediates: the top bit set.
pub const APP: AppId = AppId::new(0b1, 1);

/// Bits of the immediate that hold the channel; the job has the others under [`APP`].
const CHANNEL_BITS: u32 = 11;

/// Jobs one runner can hold (20 bits of the immediate).
pub const MAX_JOBS: usize = 1 << (APP.imm_arg_bits() - CHANNEL_BITS);

/// Channels per job (11 bits of the immediate).
pub const MAX_CHANNELS: u32 = 1 << CHANNEL_BITS;

const _: () = assert!(
    MAX_JOBS >= 1_000_000,
    "a runner holds at least a million jobs"
);

/// The immediate (and tag) of job `job`'s messages on `channel` (`job` < [`MAX_JOBS`],
/// `channel` < [`MAX_CHANNELS`]; the runner refuses jobs with more channels).
#[inline]
pub const fn imm_for(job: usize, channel: u32) -> u32 {
    APP.imm(((job as u32) << CHANNEL_BITS) | (channel & (MAX_CHANNELS - 1)))
}

/// The job and channel of a collectives' immediate (the inverse of [`imm_for`]).
#[inline]
pub(super) const fn job_and_channel(imm: u32) -> (usize, u32) {
    (
        (imm >> CHANNEL_BITS) as usize & (MAX_JOBS - 1),
        imm & (MAX_CHANNELS - 1),
    )
}

/// A timer of the runner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Timer {
    /// The job starts ([`super::JobStart::At`], or the first job "after previous").
    Begin(usize),
    /// The rank's reduction engine finished the reduction of job `job`'s receive `step`.
    ReduceDone {
        /// The job.
        job: usize,
        /// The receive step.
        step: u32,
    },
}

/// In a token's argument: a reduction finished (job in bits 32..60, step in bits 0..32).
const REDUCE_DONE: u64 = 1 << 60;
/// The job's bits in a token.
const TOKEN_JOB_MASK: u64 = (1 << 28) - 1;

const _: () = assert!(REDUCE_DONE < 1 << APP.token_arg_bits() && MAX_JOBS as u64 <= TOKEN_JOB_MASK);

impl Timer {
    /// The timer token.
    #[inline]
    pub(super) fn token(self) -> u64 {
        APP.token(match self {
            Timer::Begin(job) => job as u64 & TOKEN_JOB_MASK,
            Timer::ReduceDone { job, step } => {
                REDUCE_DONE | (job as u64 & TOKEN_JOB_MASK) << 32 | u64::from(step)
            }
        })
    }

    /// The timer of a token; `None` when it is not the runner's.
    #[inline]
    pub(super) fn of_token(token: u64) -> Option<Timer> {
        let arg = APP.token_arg(token)?;
        Some(if arg & REDUCE_DONE != 0 {
            Timer::ReduceDone {
                job: ((arg >> 32) & TOKEN_JOB_MASK) as usize,
                step: arg as u32,
            }
        } else {
            Timer::Begin((arg & TOKEN_JOB_MASK) as usize)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The old field held 2048 jobs: numbers around it, and up to the last one, come back
    /// with their channel, and no two (job, channel) pairs share an immediate.
    #[test]
    fn jobs_and_channels_round_trip_across_the_old_slot_boundary_and_up_to_the_limit() {
        let jobs = [0, 1, 2047, 2048, 2049, 4095, 4096, 1_000_000, MAX_JOBS - 1];
        let channels = [0, 1, 2, MAX_CHANNELS - 1];
        let mut seen = std::collections::BTreeSet::new();
        for &j in &jobs {
            for &c in &channels {
                let imm = imm_for(j, c);
                assert!(APP.imm_arg(imm).is_some(), "job {j} channel {c}: not ours");
                assert_eq!(job_and_channel(imm), (j, c));
                assert!(seen.insert(imm), "job {j} channel {c}: immediate reused");
            }
            for s in [0, 1, u32::MAX] {
                let t = Timer::ReduceDone { job: j, step: s };
                assert_eq!(Timer::of_token(t.token()), Some(t));
                assert!(t.token() < 1 << fabemu_fabric::transport::TOKEN_BITS);
            }
            assert_eq!(
                Timer::of_token(Timer::Begin(j).token()),
                Some(Timer::Begin(j))
            );
        }
        assert_eq!(MAX_JOBS, 1 << 20);
        // Tokens without the prefix are someone else's.
        assert_eq!(Timer::of_token(5), None);
    }
}
