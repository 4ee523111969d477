//! The steps that move money at Adyen, for a checkout whose payment belongs to Adyen (invariant 13): the
//! saga's states and deadlines are the same as Stripe's; what differs is what Adyen can be asked.
//!
//! | state | at Adyen (key) | then |
//! |---|---|---|
//! | charging | authorise (`<order>:charge`, `manualCapture`); `Authorised`: capture at once (`<order>:capture`) | the answer through the one finalize (`Authorised`, `Pending`, `Received`: processing; a 3-D Secure challenge: the customer's action), payment_pending; refused: the payment failed, cancelling_payment |
//! | payment_pending | a challenged payment that `AUTHORISATION` made processing: capture (`<order>:capture`, replayed by Adyen on every later resume) | captured on the `CAPTURE` notification; the rest as for Stripe |
//! | refunding_payment | refund (`<order>:refund`), answered `received` | the refund recorded `pending` under the modification's pspReference; done when `REFUND` says `succeeded` (a resume reads the payment, no second refund), or when it failed once recovery's give-back succeeded; refused for good: refund impossible, escalated once |
//! | cancelling_payment | with a pspReference: cancel (`<order>:cancel`), then wait for `CANCELLATION` (or `CAPTURE`, when the capture won: continued from the capture); without one: cancel by our reference (`<order>:cancel`, `POST /cancels`) | failed here at once (no capture is ever sent without a pspReference) |
//!
//! **Capture** is ours, not Adyen's automatic one: the client authorises with `manualCapture` and the saga
//! captures as soon as Adyen says `Authorised`, so every payment is captured on one path whose outcome the
//! intake reads (`AUTHORISATION` is processing, only `CAPTURE` is money taken). A 3-D Secure challenge is
//! finished by `/payments/details` with the shopper's `redirectResult` ([`Runner::complete_challenge`](super::Runner::complete_challenge), which
//! captures an `Authorised` answer), or by Adyen's `AUTHORISATION` notification, after which the waiting saga
//! captures; a challenge never finished is abandoned after `CHECKOUT_ABANDON_AFTER_SECONDS` and cancelled, so
//! no money is taken.
//!
//! **No read, no search**: Adyen has neither ([`psp::GuardedAdyen`] has no such call), so no step
//! reads a payment back; a retried authorise is Adyen's replay for its key, and a charge given up without a
//! pspReference is cancelled by our own reference.

use super::error::RunError;
use super::observe::{self, in_checkout_trace};
use super::psp_step;
use super::transition::{correlation, moved, Advanced, StepCtx};
use crate::saga::{
    after_refund, AfterRefund, CancellingPayment, Charging, Loaded, RefundCalled, RefundImpossible, RefundingPayment,
    Saga, SagaRecord,
};
use psp::adyen::{AdyenPayment, ResultCode};
use psp::{set, GuardedAdyen, PspError, Psps};
use shared::store::PaymentStore;
use shared::{
    Channel, ClientSecret, CustomerAction, Observation, OrderId, Outcome, Payment, PaymentStatus, PspName,
    PspReference, RedirectPolicy, RedirectUrl, RefundEntry, RefundReport, RefundStatus,
};
use tracing::{info, warn};

/// The Adyen client, or the deployment fault of an Adyen payment without one (deferred, alarmed).
pub(super) fn client<'a, P: Psps>(psps: &'a P, operation: &str) -> Result<&'a GuardedAdyen, RunError> {
    psps.adyen()
        .ok_or_else(|| RunError::Psp(set::not_configured(&PspName::Adyen, operation)))
}

/// Authorises the saved payment at Adyen (key `<order>:charge`: a retry, however late within Adyen's key
/// retention, gets the first answer), finalizes the answer and captures an `Authorised` one. A refusal
/// (the issuer's, or of the request) fails the payment: for Adyen a refused pspReference is final, a new
/// attempt would be a new payment.
pub(super) async fn charge<P: Psps>(
    psps: &P,
    step: StepCtx<'_>,
    saga: Saga<Charging>,
    payment: Payment,
) -> Result<Advanced, RunError> {
    let request = psp_step::charge_request(&saga, &payment);
    let adyen = client(psps, "authorise")?;
    let answer = match adyen.authorise(&format!("{}:charge", saga.order_id()), &request).await {
        Ok(answer) => answer,
        Err(refused @ (PspError::Declined(_) | PspError::Refused { .. })) => {
            let reason = format!("charge refused: {refused}");
            observe::observe(
                step.payments,
                &payment.id,
                saga.record(),
                Outcome::Failed { reason: reason.clone() },
                None,
            )
            .await?;
            let (next, event) = saga.charge_failed(reason, step.now);
            return moved(step.sagas, next, event, vec![]).await;
        }
        Err(e) => return Err(e.into()),
    };
    let customer_action = answer.result_code.needs_shopper();
    let reference = adyen_answered(step.payments, adyen, saga.record(), payment, answer).await?;
    let (next, event) = saga.payment_requested(reference, customer_action, step.now);
    moved(step.sagas, next, event, vec![]).await
}

/// Applies Adyen's answer to an authorise or to `/payments/details` through the one finalize and captures
/// an authorised payment (key `<order>:capture`). The payment's pspReference, when Adyen gave one.
async fn adyen_answered(
    payments: &PaymentStore,
    adyen: &GuardedAdyen,
    saga: &SagaRecord,
    payment: Payment,
    answer: AdyenPayment,
) -> Result<Option<PspReference>, RunError> {
    let outcome = match answer.result_code {
        code if code.needs_shopper() => Outcome::RequiresAction(customer_action(&answer)?),
        // Authorised: the money held, taken by the capture below; Pending, Received: the outcome comes by
        // notification. What is left (a refusal, an error) was turned into an error by the client.
        _ => Outcome::Processing,
    };
    let mut observation = Observation::new(Channel::Sync, outcome, correlation(&saga.order_id));
    observation.psp_reference = answer.psp_reference.clone();
    let observation = in_checkout_trace(observation, saga);
    payments.finalize_from(payment, &observation, None).await?;
    if answer.result_code == ResultCode::Authorised {
        let reference = answer
            .psp_reference
            .as_ref()
            .ok_or_else(|| RunError::Psp(PspError::BadAnswer("Authorised without a pspReference".into())))?;
        let key = format!("{}:capture", saga.order_id);
        let received = adyen.capture(&key, reference, &saga.checkout.money).await?;
        info!(order_id = %saga.order_id, capture = %received.psp_reference, "capture sent; CAPTURE says how it went");
    }
    Ok(answer.psp_reference)
}

/// What finishing a 3-D Secure challenge did ([`complete_challenge`]).
pub(super) enum Challenge {
    /// No such order.
    Unknown,
    /// Not an Adyen payment waiting for the shopper: the saga as it is.
    AsIs(Box<SagaRecord>),
    /// Adyen's answer was applied to the payment: the saga goes on from it (resumed by the runner).
    Answered,
}

/// Finishes a 3-D Secure challenge with what the shopper's return brought (`redirectResult`): Adyen's
/// `/payments/details` (key `<order>:details`), its answer applied as the authorise's is (an `Authorised`
/// one captured).
pub(super) async fn complete_challenge<P: Psps>(
    psps: &P,
    step: StepCtx<'_>,
    order: &OrderId,
    redirect_result: &str,
) -> Result<Challenge, RunError> {
    let Some(loaded) = step.sagas.load(order).await? else {
        return Ok(Challenge::Unknown);
    };
    let Loaded::PaymentPending(saga) = &loaded else {
        return Ok(Challenge::AsIs(Box::new(loaded.record().clone())));
    };
    let payment = observe::saga_payment(step.payments, saga.record()).await?;
    if payment.provider != PspName::Adyen || payment.status != PaymentStatus::RequiresAction {
        return Ok(Challenge::AsIs(Box::new(loaded.record().clone())));
    }
    let adyen = client(psps, "details")?;
    let key = format!("{order}:details");
    match adyen.details(&key, redirect_result).await {
        Ok(answer) => {
            adyen_answered(step.payments, adyen, saga.record(), payment, answer).await?;
        }
        Err(refused @ (PspError::Declined(_) | PspError::Refused { .. })) => {
            let reason = format!("3-D Secure refused: {refused}");
            observe::observe(
                step.payments,
                &payment.id,
                saga.record(),
                Outcome::Failed { reason },
                None,
            )
            .await?;
        }
        Err(e) => return Err(e.into()),
    }
    Ok(Challenge::Answered)
}

/// Captures a challenged payment Adyen authorised by notification (the shopper finished 3-D Secure
/// without our `/payments/details` call): key `<order>:capture`, the charge's, so every later resume until
/// the `CAPTURE` notification gets Adyen's replay, never a second capture. A Stripe payment, one without a
/// pspReference, or one no longer processing is left alone.
pub(super) async fn capture_authorised<P: Psps>(
    psps: &P,
    payments: &PaymentStore,
    saga: &SagaRecord,
) -> Result<(), RunError> {
    let payment = observe::saga_payment(payments, saga).await?;
    let (PspName::Adyen, Some(reference), PaymentStatus::Processing) =
        (&payment.provider, &payment.psp_reference, payment.status)
    else {
        return Ok(());
    };
    let key = format!("{}:capture", saga.order_id);
    let received = client(psps, "capture")?
        .capture(&key, reference, &saga.checkout.money)
        .await?;
    info!(order_id = %saga.order_id, capture = %received.psp_reference,
          "authorised after the challenge; capture sent, CAPTURE says how it went");
    Ok(())
}

/// Refunds the captured payment at Adyen (key `<order>:refund`). Adyen answers `received`; the refund is
/// recorded `pending` under the modification's pspReference, and the `REFUND` notification says how it
/// ended: the step is done once the payment holds it `succeeded` (the core's `refund_step`, as for Stripe),
/// waits while it is pending, and is an error (retried, then escalated) when it failed. A refusal of the
/// request is for good (Adyen has nothing to read back): refund impossible, escalated once.
pub(super) async fn refund<P: Psps>(
    psps: &P,
    step: StepCtx<'_>,
    saga: Saga<RefundingPayment>,
) -> Result<Advanced, RunError> {
    let adyen = client(psps, "refund")?;
    let money = saga.record().checkout.money;
    let (reference, key) = psp_step::refund_of(&saga)?;
    // What each answer leads to is the core's decision (`after_refund`), as for Stripe; Adyen has nothing to
    // read back, so a refusal not impossible by its code is impossible too, and a done refund is done.
    let received = match adyen.refund(&key, &reference, &money).await {
        Ok(received) => received,
        Err(refused @ PspError::Refused { .. }) => {
            let why = match after_refund(psp_step::refused_call(&refused)) {
                AfterRefund::Impossible(why) => why,
                AfterRefund::ReadBack { .. } | AfterRefund::Wait | AfterRefund::Undone => RefundImpossible::Refused,
            };
            return psp_step::refund_impossible(step, saga, why, &refused).await;
        }
        Err(e) => return Err(e.into()),
    };
    let report = RefundReport {
        refund: RefundEntry {
            refund_id: received.psp_reference.to_string(),
            amount_minor: money.amount_minor(),
            status: RefundStatus::Pending,
        },
        failure_reason: None,
        answers_give_back: None,
    };
    let mut observation = Observation::new(Channel::Sync, Outcome::Refund(report), correlation(saga.order_id()));
    observation.psp_reference = Some(reference);
    let payment_id = saga.payment_id().clone();
    let (status, settled) = observe::refund_recorded(
        step.payments,
        &payment_id,
        saga.record(),
        observation,
        Some(RefundStatus::Pending),
    )
    .await?;
    match after_refund(RefundCalled::Made(settled)) {
        AfterRefund::ReadBack { .. } => {
            let (next, event) = saga.refunded(money.amount_minor(), step.now);
            moved(step.sagas, next, event, vec![]).await
        }
        AfterRefund::Wait => {
            info!(order_id = %saga.order_id(), refund = %received.psp_reference, %status,
                  "refund received by Adyen; waiting for its REFUND notification");
            Ok(Advanced::Stopped)
        }
        AfterRefund::Undone | AfterRefund::Impossible(_) => Err(RunError::Invalid(format!(
            "refund {} ended {status} (recovery gives the money back again)",
            received.psp_reference
        ))),
    }
}

/// Compensates an Adyen charge that must take no money. A payment that is terminal already is left as it
/// is (captured meanwhile: continued from the capture). An open one with a pspReference is cancelled
/// (key `<order>:cancel`) and the saga waits for Adyen's `CANCELLATION`, or `CAPTURE` if the capture
/// came first, each resume asking again with the key; its deadline is the compensation's. One without a
/// pspReference is cancelled by our reference and failed here at once: the saga captures only what it
/// holds a pspReference of, so no money can be taken on it.
pub(super) async fn cancel<P: Psps>(
    psps: &P,
    step: StepCtx<'_>,
    saga: Saga<CancellingPayment>,
    payment: Payment,
) -> Result<Advanced, RunError> {
    let key = format!("{}:cancel", saga.order_id());
    let status = match (payment.status, &payment.psp_reference) {
        (status, _) if status.is_terminal() => status,
        (_, Some(reference)) => {
            let received = client(psps, "cancel")?.cancel(&key, reference).await?;
            info!(order_id = %saga.order_id(), cancel = %received.psp_reference,
                  "cancel received by Adyen; waiting for its CANCELLATION notification");
            return Ok(Advanced::Stopped);
        }
        (_, None) => {
            let received = client(psps, "cancel_by_reference")?
                .cancel_by_reference(&key, &payment.id)
                .await?;
            warn!(order_id = %saga.order_id(), cancel = %received.psp_reference,
                  "Adyen payment without a pspReference cancelled by our reference");
            let reason = saga.payment_failure_reason();
            observe::observe(
                step.payments,
                &payment.id,
                saga.record(),
                Outcome::Failed { reason },
                None,
            )
            .await?
        }
    };
    if status == PaymentStatus::Captured {
        info!(order_id = %saga.order_id(), "the Adyen payment was captured before the cancel; continuing from the capture");
        let reference = observe::captured_reference(step.payments, saga.payment_id()).await?;
        let (next, event) = saga.payment_succeeded(reference, step.now);
        return moved(step.sagas, next, event, vec![]).await;
    }
    let (next, event) = saga.payment_cancelled(step.now);
    moved(step.sagas, next, event, vec![]).await
}

/// What the customer's page does next: Adyen's `action` as the Drop-in takes it whole (compact JSON, when it
/// fits a client secret), and its `url` as the redirect, under our redirect policy (a URL the policy refuses
/// drops only itself, as for Stripe: the core's [`CustomerAction::offered`]).
fn customer_action(answer: &AdyenPayment) -> Result<CustomerAction, RunError> {
    let unusable = |e: String| RunError::Psp(PspError::BadAnswer(format!("Adyen action: {e}").into()));
    let action = answer.action.as_ref();
    let whole = action.and_then(|a| ClientSecret::parse(a.to_string()).ok());
    let url = action
        .and_then(|a| a.get("url"))
        .and_then(serde_json::Value::as_str)
        .map(|url| RedirectUrl::parse_with(url.to_owned(), RedirectPolicy::current()));
    let offered = CustomerAction::offered(whole, url).map_err(|e| unusable(e.to_string()))?;
    if let Some(refused) = &offered.refused_url {
        // Never the URL itself: it may carry a one-time token.
        warn!(error = %refused, "Adyen redirect URL refused by our policy; the action alone is handed on");
    }
    Ok(offered.action)
}
