//! Where a run points: the account, region, stack and table every command names before it acts (on stderr;
//! with `--json` as the `target` field of the one JSON document), so an operator never acts on production
//! thinking it is staging. A variable left in the shell that disagrees with `--stack`'s output is named in a
//! warning and refuses every write ([`Target::refuse_write`]): the stack wins, but a shell that says otherwise
//! is a sign the operator is not where they think.
//!
//! The account comes from STS `GetCallerIdentity` (allowed to every principal, no grant needed). Against the
//! local world (DynamoDB's endpoint overridden, no STS endpoint given) there is no account: it is printed as
//! unknown with the reason, never guessed.

use crate::stack::Conflict;
use serde::Serialize;
use shared::Env;
use std::time::Duration;

/// How long the account lookup may take: a run must not hang on STS before it does its work.
const ACCOUNT_DEADLINE: Duration = Duration::from_secs(5);

/// What a run acts on.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Target {
    /// The AWS account of the caller's credentials; `None` when unknown (see `account_unknown`).
    pub account: Option<String>,
    /// Why the account is unknown (local endpoints, STS's error).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub account_unknown: Option<String>,
    /// The SDK's region (`--region`, `AWS_REGION`, the profile's).
    pub region: Option<String>,
    /// `--stack`, when given.
    pub stack: Option<String>,
    /// The table every read and write goes to.
    pub table: String,
    /// Variables of the environment that disagree with the stack's outputs (the stack's value is used).
    pub conflicts: Vec<Conflict>,
}

impl Target {
    /// The line printed on stderr before a command runs.
    pub fn line(&self) -> String {
        let account = match (&self.account, &self.account_unknown) {
            (Some(account), _) => account.clone(),
            (None, Some(why)) => format!("unknown ({why})"),
            (None, None) => "unknown".to_owned(),
        };
        format!(
            "account {account}  region {}  stack {}  table {}",
            self.region.as_deref().unwrap_or("unset"),
            self.stack.as_deref().unwrap_or("none (environment)"),
            self.table
        )
    }

    /// One warning per variable that disagrees with the stack.
    pub fn warnings(&self) -> Vec<String> {
        self.conflicts
            .iter()
            .map(|c| format!("warning: {c}; the stack's value is used"))
            .collect()
    }

    /// A write with a disagreeing variable in the environment: refused, naming each one.
    pub fn refuse_write(&self) -> Option<String> {
        if self.conflicts.is_empty() {
            return None;
        }
        let named: Vec<String> = self.conflicts.iter().map(ToString::to_string).collect();
        Some(format!(
            "refusing to write: {}; unset the variable (or drop --stack to act on the environment's)",
            named.join("; ")
        ))
    }
}

/// The caller's account: STS `GetCallerIdentity`, or why it is unknown.
pub async fn account(sdk: &aws_config::SdkConfig, env: &Env) -> Result<String, String> {
    if env.optional("AWS_ENDPOINT_URL_DYNAMODB").is_some() && env.optional("AWS_ENDPOINT_URL_STS").is_none() {
        return Err("local endpoints, no AWS_ENDPOINT_URL_STS".to_owned());
    }
    let sts = aws_sdk_sts::Client::new(sdk);
    match tokio::time::timeout(ACCOUNT_DEADLINE, sts.get_caller_identity().send()).await {
        Err(_) => Err(format!("STS did not answer in {}s", ACCOUNT_DEADLINE.as_secs())),
        Ok(Err(e)) => Err(format!("STS: {}", shared::store::SdkFailure::from(e))),
        Ok(Ok(out)) => out
            .account()
            .map(str::to_owned)
            .ok_or_else(|| "STS named no account".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(conflicts: Vec<Conflict>) -> Target {
        Target {
            account: None,
            account_unknown: Some("local endpoints, no AWS_ENDPOINT_URL_STS".into()),
            region: Some("us-east-1".into()),
            stack: None,
            table: "payments-local".into(),
            conflicts,
        }
    }

    #[test]
    fn the_line_says_an_unknown_account_and_why() {
        assert_eq!(
            target(vec![]).line(),
            "account unknown (local endpoints, no AWS_ENDPOINT_URL_STS)  region us-east-1  stack none \
             (environment)  table payments-local"
        );
        assert_eq!(target(vec![]).refuse_write(), None);
    }

    #[test]
    fn a_conflict_is_a_warning_and_refuses_a_write() {
        let conflict = Conflict {
            variable: "TABLE_NAME",
            environment: "payments-dev".into(),
            output: "PaymentsTableName",
            stack: "payments-prod".into(),
        };
        let t = target(vec![conflict]);
        assert_eq!(
            t.warnings(),
            [
                "warning: TABLE_NAME=payments-dev in the environment disagrees with the stack's output \
              PaymentsTableName=payments-prod; the stack's value is used"
            ]
        );
        assert!(t.refuse_write().unwrap().contains("TABLE_NAME=payments-dev"));
    }
}
