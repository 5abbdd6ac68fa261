//! The engine run in steps: [`Stepper`] handles the events before a time the caller chooses,
//! then hands control back, so something outside the simulation (an emulation's pacing loop,
//! which follows the wall clock) can act on the actors between steps and wake them at the time
//! reached.
//!
//! A step is [`Stepper::run_until`]`(t)`: every event before `t`, none at or after it. Between
//! steps the caller may change an actor ([`Stepper::actor_mut`]) and give it an event at any
//! time not before the time reached ([`Stepper::wake`]): nothing that already happened is
//! changed, so the run stays causal. The same scenario stepped at any times, with the same
//! wakes at the same virtual times, gives the same result as one [`super::run`] would: a step
//! boundary is invisible to the actors.
//!
//! A stepper runs one partition on the calling thread: it serves runs paced by the wall clock,
//! where the speed that matters is how quickly one step answers, not the throughput of many
//! cores.

use super::worker::{Partition, Window};
use super::{
    assemble, check_world, partition, Actor, ActorId, EngineConfig, EngineError, EngineLayout,
    Progress, RunOutput, Wiring,
};
use crate::units::Time;

/// A run that advances in steps chosen by the caller (see the module docs).
pub struct Stepper<A> {
    part: Partition<A>,
    cfg: EngineConfig,
    n_actors: usize,
    progress: Progress,
    /// Every event before this time has been handled, none after it.
    reached: Time,
    steps: u64,
}

impl<A: Actor> Stepper<A> {
    /// Builds the run and starts every actor at time zero (as [`super::run`] does); no event
    /// is handled yet. `cfg.threads` is ignored (one partition); `cfg.until` still bounds the
    /// run: no event at or after it is handled.
    pub fn new(actors: Vec<A>, wiring: &Wiring, cfg: &EngineConfig) -> Result<Self, EngineError> {
        check_world(actors.len(), wiring)?;
        let plan = partition::plan(wiring, 1);
        let n_actors = actors.len();
        let mut parts = Partition::build(actors, wiring, &plan, cfg);
        let mut part = parts
            .pop()
            .ok_or_else(|| EngineError::Failure("no partition built".into()))?;
        part.start_all();
        Ok(Stepper {
            part,
            cfg: cfg.clone(),
            n_actors,
            progress: Progress::default(),
            reached: Time::ZERO,
            steps: 0,
        })
    }

    /// The time reached: every event before it has been handled.
    pub fn reached(&self) -> Time {
        self.reached
    }

    /// The time of the earliest event still pending (`None` when nothing is).
    pub fn next_event(&mut self) -> Option<Time> {
        let t = self.part.state.next_time();
        (t != u64::MAX).then_some(Time(t))
    }

    /// Handles every event before `t` (and before the configuration's `until`); a `t` not
    /// after the time reached does nothing.
    pub fn run_until(&mut self, t: Time) -> Result<(), EngineError> {
        let t = t.min(self.cfg.until + Time(1));
        if t <= self.reached {
            return Ok(());
        }
        match self.part.run_window(t.ps(), &self.progress)? {
            Window::Done => {}
            // Nothing sets this run's cancel flag.
            Window::Cancelled => {
                return Err(EngineError::Failure("a stepped run was cancelled".into()))
            }
        }
        self.reached = t;
        self.steps += 1;
        Ok(())
    }

    /// The actor `id`, to change between steps (`None` for an unknown id).
    pub fn actor_mut(&mut self, id: ActorId) -> Option<&mut A> {
        self.part.actor_mut(id)
    }

    /// The actor `id`, to read between steps (`None` for an unknown id).
    pub fn actor(&self, id: ActorId) -> Option<&A> {
        self.part.actor(id)
    }

    /// Gives actor `id` an [`super::Event::Timer`] with `token` at `at`, or at the time reached
    /// if `at` is earlier (the past cannot change). Returns the time it was set for, or `None`
    /// for an unknown id.
    pub fn wake(&mut self, id: ActorId, at: Time, token: u64) -> Option<Time> {
        if id as usize >= self.n_actors {
            return None;
        }
        let at = at.max(self.reached);
        // One partition: an actor's local index is its id.
        self.part.state.timer(id, at, token);
        Some(at)
    }

    /// Ends the run where it stands: the actors and what was counted, as [`super::run`]
    /// returns them.
    pub fn finish(self) -> Result<RunOutput<A>, EngineError> {
        let layout = EngineLayout {
            partitions: 1,
            lookahead: Time::NEVER,
            windows: self.steps,
        };
        assemble(vec![self.part], &self.cfg, layout, false, self.n_actors)
    }
}
