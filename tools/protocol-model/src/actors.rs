//! The actors: each one's local state (what survives between its steps, and is lost when it crashes) and
//! its steps. One step is one DynamoDB call or one PSP call; a crash can fall between any two.
//!
//! | actor | steps mirror |
//! |---|---|
//! | saga runner ([`RunnerPc`]) | `functions/checkout-saga/src/runner.rs`: `Runner::drive`, `Runner::advance` (reserve, await, confirm, refund, release), `Runner::charge`, `Runner::cancel_payment`, `Runner::payment_outcome` |
//! | webhook intake ([`intake`]) | `functions/webhook-intake/src/handler.rs`: `handle` steps 3 (lease + read) and 4 (finalize, releasing the lease) |
//! | recovery ([`RecoveryPc`], [`recovery_ask`], [`recovery_finalize`]) | `shared/src/recovery.rs`: `Recovery::reconcile` (lease, read, PSP status query, finalize) |
//! | customer ([`CustomerPc`]) | completes the 3-D Secure challenge at the PSP with the secret our client view gave; `POST /checkouts/{order}/cancel` (`functions/checkout-saga/src/api.rs`: `orders::cancel`, then `Runner::cancel_by_customer`) |
//! | anomaly refunds ([`refund_anomaly`]) | intended (issue 12, item 3): money taken on a failed payment is refunded with the key `<payment>:anomaly:<PaymentIntent>` |
//! | order projection ([`relay`]) | the outbox relay and `functions/order-projection`: the projection catches up with the payment (best effort) |
//!
//! The saga's transitions are the real typestate ([`payments_core::saga`]): every step loads the stored
//! record with [`Loaded::from_record`] (the real consistency check) and moves it with the real transition
//! method, which the model saves with [`World::save_saga`].
//!
//! Two charge steps are modelled ([`ChargeMode`]): main's (the payment is created through the 24-hour
//! idempotency record of `<order>:charge`) and the intended one of issue 12 item 4 (the payment id is saved
//! in the saga before the charge; every retry reuses it and the key).

use crate::ids;
use crate::model::{ChargeMode, Config};
use crate::psp::{IntentStatus, IntentView, Psp};
use crate::world::{Holder, OrderStatus, StoredSaga, World};
use payments_core::saga::{Loaded, SagaRecord, SagaStatus};
use payments_core::{Observation, Outcome, Path, PaymentId, PaymentStatus};

/// What the runner decided from the payment's outcome in `payment_pending` (`Runner::advance`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Pending {
    Captured,
    Failed(PaymentStatus),
    /// Still the customer's turn past the abandonment deadline.
    Abandoned(PaymentStatus),
    /// Past the payment deadline: handed to recovery.
    HandToRecovery,
}

/// Where the runner is within the action of the saga it loaded.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Sub {
    /// `started`: reserve the stock and save `stock_reserved` in one transaction.
    Reserve,
    /// `stock_reserved`, intended: save a new payment id in the saga before charging.
    PlanPayment,
    /// Create the payment item (intended: by the saved id; main: `create_idempotent` under `<order>:charge`).
    CreatePayment,
    /// Create and confirm the PaymentIntent with the key `<order>:charge`.
    Charge(PaymentId),
    /// Finalize the PSP's synchronous answer.
    FinalizeCharge(PaymentId, IntentView),
    /// Save `payment_requested`.
    SaveRequested(PaymentId, IntentView),
    /// The PSP refused the charge: save `charge_failed`.
    SaveChargeFailed(PaymentId),
    /// `payment_pending`: save what the read decided.
    Await(Pending),
    /// `payment_captured`: confirm the order (conditioned on `pending`) with `completed`, or fail.
    Confirm,
    /// `refunding_payment`: refund at the PSP (key `<order>:refund`).
    Refund,
    /// Read the PaymentIntent back and finalize its refunded total.
    ObserveRefund,
    /// Save `refunded`.
    SaveRefunded,
    /// `cancelling_payment`: read our payment.
    CancelRead,
    /// Cancel the PaymentIntent (key `<order>:cancel`); the payment's status as read.
    CancelCall(PaymentId, u8, PaymentStatus),
    /// Finalize what the cancel answered.
    CancelObserve(PaymentId, IntentView),
    /// The payment is still open: fail it (finalize `failed`).
    CancelFail(PaymentId, PaymentStatus),
    /// Save `payment_succeeded` (the status was captured) or `payment_cancelled`.
    CancelSave(PaymentStatus),
    /// `releasing_stock`: put the stock back and save `compensated`.
    Release,
}

/// A saga runner (an inbox consumer or the sweeper resuming a saga).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RunnerPc {
    /// No saga loaded.
    Idle,
    /// Working on the saga as loaded (and the payment id it had saved), at `step`.
    At {
        saga: Box<StoredSaga>,
        planned: Option<PaymentId>,
        step: Sub,
    },
}

/// Recovery (the reconciler, or the saga handing a payment over past its deadline).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RecoveryPc {
    Idle,
    /// Holds the lease and has the PSP's answer, taken at PSP time `at`.
    Asked(PaymentId, IntentView, u8),
}

/// Where the customer's cancel request is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum CancelPc {
    #[default]
    NotYet,
    /// The order is cancelled; the request goes on to the saga.
    OrderCancelled,
    Done,
}

/// The customer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct CustomerPc {
    /// Completed the 3-D Secure challenge.
    pub acted: bool,
    pub cancel: CancelPc,
}

fn first_sub(cfg: &Config, saga: &SagaRecord, planned: &Option<PaymentId>) -> Option<Sub> {
    Some(match saga.status {
        SagaStatus::Started => Sub::Reserve,
        SagaStatus::StockReserved => match (cfg.charge_mode, planned) {
            (ChargeMode::SavedBeforeCharge, None) => Sub::PlanPayment,
            _ => Sub::CreatePayment,
        },
        SagaStatus::PaymentCaptured => Sub::Confirm,
        SagaStatus::RefundingPayment => Sub::Refund,
        SagaStatus::CancellingPayment => Sub::CancelRead,
        SagaStatus::ReleasingStock => Sub::Release,
        SagaStatus::PaymentPending | SagaStatus::Completed | SagaStatus::Compensated => return None,
    })
}

fn at(cfg: &Config, saga: &StoredSaga, planned: &Option<PaymentId>) -> RunnerPc {
    match first_sub(cfg, &saga.0, planned) {
        Some(step) => RunnerPc::At {
            saga: Box::new(saga.clone()),
            planned: planned.clone(),
            step,
        },
        None => RunnerPc::Idle,
    }
}

/// `Runner::payment_outcome` and the `payment_pending` arm of `Runner::advance`: what the saga does with
/// the payment's outcome. `None`: it waits (`Advanced::Stopped`).
fn await_decision(cfg: &Config, w: &World, saga: &SagaRecord) -> Option<Pending> {
    let now = w.now_ms();
    let past_deadline = now >= saga.payment_deadline_ms;
    let abandoned = !cfg.never_abandon && now >= saga.started_at_ms + ids::ABANDON_AFTER_MS;
    let projected = w.projection;
    let outcome = if !(past_deadline || abandoned) || projected.is_some_and(PaymentStatus::is_terminal) {
        projected
    } else {
        let payment = saga.payment_id.as_ref().and_then(|id| w.payment(id));
        payment.map(|p| p.status).or(projected)
    };
    match outcome {
        Some(PaymentStatus::Captured) => Some(Pending::Captured),
        Some(status @ (PaymentStatus::Failed | PaymentStatus::Refunded)) => Some(Pending::Failed(status)),
        Some(status @ (PaymentStatus::Pending | PaymentStatus::RequiresAction | PaymentStatus::AttemptFailed))
            if abandoned =>
        {
            Some(Pending::Abandoned(status))
        }
        _ if past_deadline && !saga.recovery_requested => Some(Pending::HandToRecovery),
        _ => None,
    }
}

/// One step of runner `i`. `lose`: the PSP's answer to this step's call is lost (the call happened); `None`
/// when the step makes no call, or nothing changes.
pub fn runner_step(cfg: &Config, w: &World, i: usize, lose: bool) -> Option<World> {
    let calls_psp = matches!(
        w.runners.get(i)?,
        RunnerPc::At {
            step: Sub::Charge(_) | Sub::Refund | Sub::ObserveRefund | Sub::CancelCall(..),
            ..
        }
    );
    if lose && (!calls_psp || w.losses_left == 0) {
        return None;
    }
    let pc = w.runners.get(i)?.clone();
    let RunnerPc::At { saga, planned, step } = pc else {
        // Load the saga (`SagaStore::load`); in `payment_pending` also read the outcome and decide at once,
        // so a saga that waits is no step at all.
        let record = &w.saga.0;
        if record.status.is_terminal() || Loaded::from_record(record.clone()).is_err() {
            return None;
        }
        let mut next = w.clone();
        next.runners[i] = if record.status == SagaStatus::PaymentPending {
            RunnerPc::At {
                saga: Box::new(w.saga.clone()),
                planned: w.saga_payment.clone(),
                step: Sub::Await(await_decision(cfg, w, record)?),
            }
        } else {
            at(cfg, &w.saga, &w.saga_payment)
        };
        return Some(next);
    };
    let mut next = w.clone();
    let now = World::STAMP_MS;
    let version = saga.0.version;
    let loaded = Loaded::from_record(saga.0.clone()).ok()?;
    let order = ids::order();
    // After a save: go on from the new state without a re-read (`Advanced::Moved`); after a conflict: reload.
    let moved = |next: &mut World, saved: bool| {
        next.runners[i] = if saved {
            at(cfg, &next.saga, &next.saga_payment)
        } else {
            RunnerPc::Idle
        };
    };
    // A lost answer: the backoff retries the same action from the same loaded saga.
    let retry = |next: &mut World| {
        next.losses_left -= 1;
        next.runners[i] = at(cfg, &saga, &planned);
    };
    let goto = |next: &mut World, step: Sub| {
        next.runners[i] = RunnerPc::At {
            saga: saga.clone(),
            planned: planned.clone(),
            step,
        };
    };
    match (step, loaded) {
        (Sub::Reserve, Loaded::Started(s)) => {
            if next.available >= s.record().checkout.quantity {
                let (n, e) = s.stock_reserved(now);
                let saved = next.save_saga(version, n, e);
                if saved {
                    next.available -= ids::QUANTITY;
                }
                moved(&mut next, saved);
            } else {
                let (n, e) = s.reservation_failed("out of stock".into(), now);
                let saved = next.save_saga(version, n, e);
                moved(&mut next, saved);
            }
        }
        (Sub::PlanPayment, Loaded::StockReserved(_)) => {
            // A conditional update of the saga item: only if nobody moved it or saved an id meanwhile.
            if next.saga.0.version == version && next.saga_payment.is_none() {
                let id = ids::payment(next.payments.len() + 1);
                next.saga_payment = Some(id.clone());
                next.runners[i] = RunnerPc::At {
                    saga,
                    planned: Some(id),
                    step: Sub::CreatePayment,
                };
            } else {
                next.runners[i] = RunnerPc::Idle;
            }
        }
        (Sub::CreatePayment, Loaded::StockReserved(_)) => {
            let id = match (cfg.charge_mode, &planned) {
                (ChargeMode::SavedBeforeCharge, Some(id)) => id.clone(),
                (ChargeMode::SavedBeforeCharge, None) => return None,
                // `PaymentStore::create_idempotent`: the record replays the first payment while it lives.
                (ChargeMode::IdempotencyRecord, _) => match &next.charge_record {
                    Some(id) => id.clone(),
                    None => {
                        let id = ids::payment(next.payments.len() + 1);
                        next.charge_record = Some(id.clone());
                        id
                    }
                },
            };
            next.create_payment(&id);
            goto(&mut next, Sub::Charge(id));
        }
        (Sub::Charge(id), Loaded::StockReserved(_)) => {
            let key = if cfg.fresh_charge_key {
                format!("{order}:charge:{}", next.psp.intents.len())
            } else {
                format!("{order}:charge")
            };
            let answer = next.psp.charge(&key, &id);
            if lose {
                retry(&mut next);
            } else {
                match answer {
                    Ok(view) => goto(&mut next, Sub::FinalizeCharge(id, view)),
                    Err(_) => goto(&mut next, Sub::SaveChargeFailed(id)),
                }
            }
        }
        (Sub::FinalizeCharge(id, view), Loaded::StockReserved(_)) => {
            if let Some(observation) = view.observation(Path::Sync) {
                next.finalize(&id, &observation, None)?;
            }
            goto(&mut next, Sub::SaveRequested(id, view));
        }
        (Sub::SaveRequested(id, view), Loaded::StockReserved(s)) => {
            let action = view.status == IntentStatus::RequiresAction;
            let (n, e) = s.payment_requested(id, Some(view.reference()), action, now);
            let saved = next.save_saga(version, n, e);
            moved(&mut next, saved);
        }
        (Sub::SaveChargeFailed(id), Loaded::StockReserved(s)) => {
            let (n, e) = s.charge_failed(Some(id), "charge refused".into(), now);
            let saved = next.save_saga(version, n, e);
            moved(&mut next, saved);
        }
        (Sub::Await(decision), Loaded::PaymentPending(s)) => {
            let saved = match decision {
                Pending::Captured => {
                    let (n, e) = s.payment_captured(now);
                    next.save_saga(version, n, e)
                }
                Pending::Failed(status) => {
                    let (n, e) = s.payment_failed(format!("payment {status}"), now);
                    next.save_saga(version, n, e)
                }
                Pending::Abandoned(status) => {
                    let (n, e) = s.payment_failed(format!("abandoned: payment still {status}"), now);
                    next.save_saga(version, n, e)
                }
                Pending::HandToRecovery => {
                    let (n, e) = s.recovery_requested(now);
                    next.save_saga(version, n, e)
                }
            };
            moved(&mut next, saved);
        }
        (Sub::Confirm, Loaded::PaymentCaptured(s)) => {
            // One transaction: the order's update conditioned on `pending`, and the saga's.
            let saved = if next.order == OrderStatus::Pending {
                let (n, e) = s.order_confirmed(now);
                let saved = next.save_saga(version, n, e);
                if saved {
                    next.order = OrderStatus::Confirmed;
                }
                saved
            } else {
                let (n, e) = s.confirmation_failed("order no longer pending (cancelled by the customer)".into(), now);
                next.save_saga(version, n, e)
            };
            moved(&mut next, saved);
        }
        (Sub::Refund, Loaded::RefundingPayment(s)) => {
            let index = s.record().psp_reference.as_ref().and_then(Psp::index_of)?;
            let accepted = next.psp.refund(&format!("{order}:refund"), index, None);
            if lose {
                retry(&mut next);
            } else if accepted {
                goto(&mut next, Sub::ObserveRefund);
            } else {
                // Refused: retried, then escalated; the sweeper resumes it.
                next.runners[i] = RunnerPc::Idle;
            }
        }
        (Sub::ObserveRefund, Loaded::RefundingPayment(s)) => {
            let index = s.record().psp_reference.as_ref().and_then(Psp::index_of)?;
            if lose {
                retry(&mut next);
            } else {
                let view = next.psp.retrieve(index)?;
                if let Some(observation) = view.observation(Path::Sync) {
                    next.finalize(s.payment_id(), &observation, None)?;
                }
                goto(&mut next, Sub::SaveRefunded);
            }
        }
        (Sub::SaveRefunded, Loaded::RefundingPayment(s)) => {
            let (n, e) = s.refunded(ids::AMOUNT, now);
            let saved = next.save_saga(version, n, e);
            moved(&mut next, saved);
        }
        (Sub::CancelRead, Loaded::CancellingPayment(s)) => match s.payment_id().cloned() {
            None => {
                let (n, e) = s.payment_cancelled(now);
                let saved = next.save_saga(version, n, e);
                moved(&mut next, saved);
            }
            Some(id) => {
                let payment = next.payment(&id)?;
                let status = payment.status;
                let reference = payment.psp_reference.as_ref().and_then(Psp::index_of);
                match reference {
                    Some(index) if !status.is_terminal() => goto(&mut next, Sub::CancelCall(id, index, status)),
                    _ => goto(&mut next, after_status(id, status)),
                }
            }
        },
        (Sub::CancelCall(id, index, _), Loaded::CancellingPayment(_)) => {
            let answer = next.psp.cancel(&format!("{order}:cancel"), index);
            if lose {
                retry(&mut next);
            } else {
                // Refused with the PaymentIntent: it succeeded (or was canceled) meanwhile.
                let view = answer.unwrap_or_else(|refused| refused);
                goto(&mut next, Sub::CancelObserve(id, view));
            }
        }
        (Sub::CancelObserve(id, view), Loaded::CancellingPayment(_)) => {
            let status = match view.observation(Path::Sync) {
                Some(observation) => next.finalize(&id, &observation, None)?.status,
                None => next.payment(&id)?.status,
            };
            goto(&mut next, after_status(id, status));
        }
        (Sub::CancelFail(id, status), Loaded::CancellingPayment(s)) => {
            let reason = s
                .record()
                .failure
                .as_ref()
                .map(|f| format!("checkout cancelled: {}", f.reason))
                .unwrap_or_default();
            let observation = Observation::new(Path::Sync, Outcome::Failed { reason }, psp_correlation());
            let after = next.finalize(&id, &observation, None)?.status;
            // Main's `Runner::cancel_payment` goes on with the status it had *before* this finalize, even when
            // the finalize found the payment captured meanwhile (see `Config::cancel_reads_final_status`).
            let status = if cfg.cancel_reads_final_status { after } else { status };
            goto(&mut next, Sub::CancelSave(status));
        }
        (Sub::CancelSave(status), Loaded::CancellingPayment(s)) => {
            let saved = if status == PaymentStatus::Captured {
                match s.payment_succeeded(now) {
                    Ok((n, e)) => next.save_saga(version, n, e),
                    Err(_) => false,
                }
            } else {
                let (n, e) = s.payment_cancelled(now);
                next.save_saga(version, n, e)
            };
            moved(&mut next, saved);
        }
        (Sub::Release, Loaded::ReleasingStock(s)) => {
            let (n, e) = s.stock_released(now);
            let saved = next.save_saga(version, n, e);
            if saved {
                next.available += ids::QUANTITY;
            }
            moved(&mut next, saved);
        }
        // The loaded record is not in the state the step belongs to: cannot happen (steps follow loads).
        _ => return None,
    }
    Some(next)
}

fn after_status(id: PaymentId, status: PaymentStatus) -> Sub {
    if status.is_terminal() {
        Sub::CancelSave(status)
    } else {
        Sub::CancelFail(id, status)
    }
}

fn psp_correlation() -> payments_core::CorrelationId {
    ids::valid(payments_core::CorrelationId::parse("model"))
}

/// How the PSP delivers one webhook.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Delivery {
    /// Delivered and answered 2xx: it leaves the queue.
    Once,
    /// Delivered, and a copy stays to be delivered again later.
    Twice,
    /// Never delivered (the PSP gave up).
    Lost,
    /// Intake took the payment's lease and crashed: no 2xx, the webhook stays queued, the lease stays until
    /// it expires.
    Crashed,
}

/// Webhook intake handles webhook `k` (`handle`, steps 3 and 4): takes the payment's lease (held: a 5xx,
/// the webhook stays queued and nothing changes), finalizes, releasing the lease in the transaction. A
/// deferred decision is a 5xx too. Lease, read and finalize are one step: the read is joined with the lease
/// in the code, the finalize decides again on a version conflict, and nobody else takes the lease
/// meanwhile, so no other step can fall between them with a different outcome; a crash between them is
/// [`Delivery::Crashed`].
pub fn intake(w: &World, k: usize, how: Delivery) -> Option<World> {
    let webhook = w.psp.webhooks.get(k)?.clone();
    let mut next = w.clone();
    match how {
        Delivery::Lost => {
            if next.losses_left == 0 {
                return None;
            }
            next.losses_left -= 1;
            next.psp.webhooks.remove(k);
            return Some(next);
        }
        Delivery::Twice if next.duplicates_left == 0 => return None,
        Delivery::Twice => next.duplicates_left -= 1,
        Delivery::Crashed if next.crashes_left == 0 => return None,
        Delivery::Crashed => next.crashes_left -= 1,
        Delivery::Once => {
            next.psp.webhooks.remove(k);
        }
    }
    if w.lease.is_some() {
        return None;
    }
    let payment = w.psp.intents.get(usize::from(webhook.intent.index))?.payment.clone();
    w.payment(&payment)?;
    next.lease = Some((payment.clone(), Holder::Intake));
    if how == Delivery::Crashed {
        return Some(next);
    }
    let observation = webhook.observation()?;
    let done = next.finalize(&payment, &observation, Some(Holder::Intake))?;
    if done.deferred && how == Delivery::Once {
        next.psp.webhooks.push(webhook);
    }
    Some(next)
}

/// Recovery, step 1 (`Recovery::reconcile`): take the lease of open payment `k` (stale: past the payment
/// timeout) and ask the PSP. Taking the lease and asking are one step: no other step reads the lease but
/// intake, which a held lease only turns away. A PSP answer that would change nothing now is no step (the
/// lease is released at once); a lost answer is the same.
pub fn recovery_ask(w: &World, k: usize) -> Option<World> {
    if w.recovery != RecoveryPc::Idle || w.clock == 0 || w.lease.is_some() {
        return None;
    }
    let payment = &w.payments.get(k)?.0;
    let index = payment.psp_reference.as_ref().and_then(Psp::index_of)?;
    if payment.status.is_terminal() {
        return None;
    }
    let view = w.psp.retrieve(index)?;
    let observation = recovery_observation(&view, w.psp.time)?;
    if !matches!(
        payments_core::decide(payment, &observation, World::STAMP_MS),
        payments_core::Decision::Apply(_)
    ) {
        return None;
    }
    let mut next = w.clone();
    next.lease = Some((payment.id.clone(), Holder::Recovery));
    next.recovery = RecoveryPc::Asked(payment.id.clone(), view, w.psp.time);
    Some(next)
}

fn recovery_observation(view: &IntentView, at: u8) -> Option<Observation> {
    let mut observation = view.observation(Path::Recovery)?;
    // Stamped with the query's time: no event the PSP sent before it is newer.
    observation.occurred_at_ms = Some(i64::from(at) * 1000);
    Some(observation)
}

/// Recovery, step 2: finalize the PSP's answer under the lease (released in the transaction).
pub fn recovery_finalize(w: &World) -> Option<World> {
    let RecoveryPc::Asked(id, view, at) = &w.recovery else {
        return None;
    };
    let mut next = w.clone();
    next.finalize(id, &recovery_observation(view, *at)?, Some(Holder::Recovery))?;
    next.recovery = RecoveryPc::Idle;
    Some(next)
}

/// Intended (issue 12, item 3): refund money taken on a failed payment, key `<payment>:anomaly:<PaymentIntent>`,
/// the captured amount. `lose`: the answer is lost and the refund is tried again.
pub fn refund_anomaly(w: &World, lose: bool) -> Option<World> {
    let (payment, reference) = w.anomaly_refunds.first()?.clone();
    if lose && w.losses_left == 0 {
        return None;
    }
    let index = Psp::index_of(&reference)?;
    let mut next = w.clone();
    next.psp
        .refund(&format!("{payment}:anomaly:{reference}"), index, Some(ids::AMOUNT));
    if lose {
        next.losses_left -= 1;
    } else {
        next.anomaly_refunds.remove(0);
    }
    Some(next)
}

/// The order projection catches up with the saga's payment.
pub fn relay(w: &World) -> Option<World> {
    let status = w.payment(w.saga_payment_id()?)?.status;
    if w.projection == Some(status) {
        return None;
    }
    let mut next = w.clone();
    next.projection = Some(status);
    Some(next)
}

/// The customer completes the 3-D Secure challenge with the client secret our client view of a payment
/// shows (`ClientView::from`), at the PaymentIntent it belongs to.
pub fn customer_acts(w: &World) -> Option<World> {
    if w.customer.acted || !w.psp.intents.iter().any(|i| i.status == IntentStatus::RequiresAction) {
        return None;
    }
    let index = w.payments.iter().find_map(|p| {
        let view = payments_core::ClientView::from(&p.0);
        match view {
            payments_core::ClientView::RequiresAction(_) if view.carries_secret() => {
                p.0.psp_reference.as_ref().and_then(Psp::index_of)
            }
            _ => None,
        }
    })?;
    let mut next = w.clone();
    next.customer.acted = true;
    next.psp.complete_action(index).then_some(next)
}

/// `POST /checkouts/{order}/cancel`, first step: `orders::cancel` (conditioned on `pending`).
pub fn customer_cancels(w: &World) -> Option<World> {
    if w.customer.cancel != CancelPc::NotYet {
        return None;
    }
    let mut next = w.clone();
    if w.order == OrderStatus::Pending {
        next.order = OrderStatus::Cancelled;
        next.customer.cancel = CancelPc::OrderCancelled;
    } else {
        next.customer.cancel = CancelPc::Done;
    }
    Some(next)
}

/// Second step: `Runner::cancel_by_customer` (a saga waiting for its payment fails it: the runner then
/// cancels the PaymentIntent). Load and save are one step here.
pub fn customer_cancels_saga(w: &World) -> Option<World> {
    if w.customer.cancel != CancelPc::OrderCancelled {
        return None;
    }
    let mut next = w.clone();
    next.customer.cancel = CancelPc::Done;
    if let Ok(Loaded::PaymentPending(s)) = Loaded::from_record(w.saga.0.clone()) {
        let version = s.record().version;
        let (n, e) = s.payment_failed("cancelled by the customer".into(), World::STAMP_MS);
        next.save_saga(version, n, e);
    }
    Some(next)
}

/// The PSP captures a processing PaymentIntent.
pub fn psp_settles(w: &World) -> Option<World> {
    let index = w
        .psp
        .intents
        .iter()
        .position(|i| i.status == IntentStatus::Processing)?;
    let mut next = w.clone();
    next.psp.settle(u8::try_from(index).ok()?).then_some(next)
}

/// A lease whose holder crashed expires (its TTL is longer than any live holder's work).
pub fn expire_lease(w: &World) -> Option<World> {
    let (id, holder) = w.lease.as_ref()?;
    let live = match holder {
        Holder::Intake => false,
        Holder::Recovery => matches!(&w.recovery, RecoveryPc::Asked(p, ..) if p == id),
    };
    if live {
        return None;
    }
    let mut next = w.clone();
    next.lease = None;
    Some(next)
}

/// Which actor crashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Actor {
    Runner(u8),
    Recovery,
    Customer,
}

/// `actor` crashes: its local state is gone. A webhook it held was not answered 2xx and comes again; a
/// lease it held stays until it expires.
pub fn crash(w: &World, actor: Actor) -> Option<World> {
    if w.crashes_left == 0 {
        return None;
    }
    let mut next = w.clone();
    next.crashes_left -= 1;
    match actor {
        Actor::Runner(i) => {
            let pc = next.runners.get_mut(usize::from(i))?;
            if *pc == RunnerPc::Idle {
                return None;
            }
            *pc = RunnerPc::Idle;
        }
        Actor::Recovery => {
            if w.recovery == RecoveryPc::Idle {
                return None;
            }
            next.recovery = RecoveryPc::Idle;
        }
        Actor::Customer => {
            if w.customer.cancel != CancelPc::OrderCancelled {
                return None;
            }
            next.customer.cancel = CancelPc::Done;
        }
    }
    Some(next)
}
