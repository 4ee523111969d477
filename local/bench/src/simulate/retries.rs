//! The PSPs' own retries of a refused webhook, as the limits table states them: Stripe's back-off (retried
//! for up to three days; the steps are not published, the table's `schedule_s` is the assumption) and
//! Adyen's three quick retries (9, 18, 27 s after the failure) followed by one retry queue per endpoint,
//! whose head is retried at growing intervals (2, 5, 10 ... minutes, up to 8 hours, for 30 days) and which,
//! once its head gets through, delivers the rest in order. Counts are expected values (f64): the
//! simulation is of flows, not of single webhooks.

use std::collections::BTreeMap;

/// The most attempts a webhook makes that the calendar tells apart (Stripe's schedule has 13 retries, Adyen
/// 3 quick ones); later ones are counted as the last.
pub const ATTEMPTS: usize = 16;

/// Webhooks due at a second, by the attempt they will be (1 = the first retry).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Calendar {
    due: BTreeMap<u64, [f64; ATTEMPTS]>,
    /// Everything on it, kept as it changes (summing the calendar each second would cost its size).
    pending: f64,
}

impl Calendar {
    pub fn add(&mut self, at: u64, attempt: usize, count: f64) {
        if count > 1e-9 {
            let slot = attempt.min(ATTEMPTS - 1);
            if let Some(n) = self.due.entry(at).or_insert([0.0; ATTEMPTS]).get_mut(slot) {
                *n += count;
                self.pending += count;
            }
        }
    }

    /// Everything due at `t` or before, taken off the calendar, by attempt.
    pub fn take_due(&mut self, t: u64) -> [f64; ATTEMPTS] {
        let mut out = [0.0; ATTEMPTS];
        while let Some(entry) = self.due.first_entry() {
            if *entry.key() > t {
                break;
            }
            for (sum, n) in out.iter_mut().zip(entry.remove()) {
                *sum += n;
                self.pending -= n;
            }
        }
        if self.due.is_empty() {
            self.pending = 0.0;
        }
        out
    }

    /// The next second something is due.
    pub fn next(&self) -> Option<u64> {
        self.due.keys().next().copied()
    }

    pub fn pending(&self) -> f64 {
        self.pending.max(0.0)
    }
}

/// Stripe: a refused attempt `attempt` (0 = the first delivery) is due again after the schedule's step;
/// past the last step it is given up (the catch-up's to find, `given_up`).
#[derive(Debug, Clone, PartialEq)]
pub struct Stripe {
    pub schedule_s: Vec<f64>,
    pub calendar: Calendar,
    pub given_up: f64,
}

impl Stripe {
    pub fn refused(&mut self, t: u64, attempt: usize, count: f64) {
        match self.schedule_s.get(attempt) {
            Some(wait) => self.calendar.add(t + *wait as u64, attempt + 1, count),
            None => self.given_up += count,
        }
    }
}

/// Adyen's endpoint: quick retries on a calendar, then the queue (its length, when its head is tried next,
/// which interval that was).
#[derive(Debug, Clone, PartialEq)]
pub struct Adyen {
    pub quick_s: Vec<f64>,
    pub queue_intervals_s: Vec<f64>,
    pub calendar: Calendar,
    pub queued: f64,
    pub head_due: Option<u64>,
    pub interval: usize,
    /// The queue delivers its webhooks at this rate once its head got through (an assumption: Adyen
    /// publishes none).
    pub drain_per_s: f64,
    /// The head got through: the queue is draining.
    pub draining: bool,
}

impl Adyen {
    /// A refused quick-retry or first delivery: the next quick retry, or the queue after the third.
    pub fn refused(&mut self, t: u64, attempt: usize, count: f64) {
        match (attempt, self.quick_s.get(attempt)) {
            (0, Some(at)) => self.calendar.add(t + *at as u64, 1, count),
            (n, Some(at)) => {
                let step = at - self.quick_s.get(n - 1).copied().unwrap_or_default();
                self.calendar.add(t + step as u64, n + 1, count);
            }
            (_, None) => self.enqueue(t, count),
        }
    }

    fn enqueue(&mut self, t: u64, count: f64) {
        if self.queued <= 0.0 && self.head_due.is_none() {
            self.interval = 0;
            self.head_due = Some(t + self.step(0));
            self.draining = false;
        }
        self.queued += count;
    }

    fn step(&self, interval: usize) -> u64 {
        let last = self.queue_intervals_s.last().copied().unwrap_or(28_800.0);
        self.queue_intervals_s.get(interval).copied().unwrap_or(last) as u64
    }

    /// What the queue tries to deliver at `t`: the head when due, or the next share of a draining queue.
    pub fn offered(&self, t: u64) -> f64 {
        if self.queued <= 0.0 {
            return 0.0;
        }
        if self.draining {
            return self.queued.min(self.drain_per_s);
        }
        match self.head_due {
            Some(due) if due <= t => self.queued.min(1.0),
            _ => 0.0,
        }
    }

    /// The outcome of what the queue offered at `t`: `accepted` of it got through.
    pub fn answered(&mut self, t: u64, offered: f64, accepted: f64) {
        if offered <= 0.0 {
            return;
        }
        self.queued = (self.queued - accepted).max(0.0);
        if self.queued <= 1e-9 {
            self.queued = 0.0;
            self.head_due = None;
            self.draining = false;
        } else if accepted + 1e-9 >= offered {
            self.draining = true;
        } else {
            // The head (or the drain) was refused: the queue waits for its next interval.
            self.draining = false;
            self.interval += 1;
            self.head_due = Some(t + self.step(self.interval));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adyen() -> Adyen {
        Adyen {
            quick_s: vec![9.0, 18.0, 27.0],
            queue_intervals_s: vec![120.0, 300.0],
            calendar: Calendar::default(),
            queued: 0.0,
            head_due: None,
            interval: 0,
            drain_per_s: 10.0,
            draining: false,
        }
    }

    #[test]
    fn adyen_retries_three_times_quickly_then_queues_and_drains_in_order() {
        let mut a = adyen();
        a.refused(100, 0, 5.0);
        assert_eq!(a.calendar.take_due(109)[1], 5.0);
        a.refused(109, 1, 5.0);
        assert_eq!(a.calendar.take_due(118)[2], 5.0);
        a.refused(118, 2, 5.0);
        assert_eq!(a.calendar.take_due(127)[3], 5.0);
        a.refused(127, 3, 5.0);
        assert_eq!((a.queued, a.head_due), (5.0, Some(247)));
        assert_eq!(a.offered(246), 0.0);
        assert_eq!(a.offered(247), 1.0);
        a.answered(247, 1.0, 0.0);
        assert_eq!(a.head_due, Some(547), "the second interval");
        a.answered(547, 1.0, 1.0);
        assert!(a.draining);
        assert_eq!(a.offered(548), 4.0);
        a.answered(548, 4.0, 4.0);
        assert_eq!((a.queued, a.head_due), (0.0, None));
    }

    #[test]
    fn stripe_backs_off_then_gives_up() {
        let mut s = Stripe {
            schedule_s: vec![60.0, 120.0],
            calendar: Calendar::default(),
            given_up: 0.0,
        };
        s.refused(0, 0, 2.0);
        s.refused(60, 1, 2.0);
        s.refused(180, 2, 2.0);
        let due = s.calendar.take_due(200);
        assert_eq!((due[1], due[2]), (2.0, 2.0));
        assert_eq!(s.given_up, 2.0);
    }
}
