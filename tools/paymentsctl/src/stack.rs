//! `--stack NAME`: the deployed stack's outputs name the table, the queues and the intake's log group, so an
//! operator needs the stack's name (and `--region`, `--profile`) instead of five environment variables.
//!
//! The outputs are read once (`cloudformation:DescribeStacks`, an operator's grant only: no function calls
//! CloudFormation) and become the functions' own variables, over the process environment: the explicit
//! `--stack` wins, and a variable left in the shell that says otherwise is a [`Conflict`] (warned about,
//! refused for writes: [`crate::target`]). A variable the stack has no output for still comes from the
//! environment. Which output feeds which variable is [`OUTPUTS`]; the mapping is a pure function
//! ([`StackSettings::from_outputs`]) tested without AWS, and a test checks every output named here is in
//! `infra/template.yaml`.

use shared::Env;
use std::collections::BTreeMap;

/// The template's output that names each setting: (output key, variable, required).
///
/// Only the table is required: a stack deployed before an output existed still serves the commands that do not
/// need it, and those that do say which variable to set.
pub const OUTPUTS: [(&str, &str, bool); 7] = [
    ("PaymentsTableName", "TABLE_NAME", true),
    ("EventsQueueUrl", "QUEUE_URL", false),
    ("EventsDlqUrl", "DLQ_URL", false),
    ("SagaEscalationQueueUrl", "ESCALATION_QUEUE_URL", false),
    ("IntakeLogGroupName", "INTAKE_LOG_GROUP", false),
    ("CheckoutSweeperFunctionName", "CHECKOUT_SWEEPER_FUNCTION", false),
    // The functions' shard count: with the default's 8 an operator's doctor would miss the shards above it.
    ("OpenItemsShards", "OPEN_ITEMS_SHARDS", false),
];

/// Why a stack's outputs could not become settings.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StackError {
    #[error("stack {stack} not found (check --stack, --region and --profile)")]
    NotFound { stack: String },
    #[error("stack {stack} has no output {output} (deploy infra/template.yaml, or set {variable})")]
    MissingOutput {
        stack: String,
        output: &'static str,
        variable: &'static str,
    },
}

/// A variable of the environment that disagrees with the stack's output for it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, thiserror::Error)]
#[error("{variable}={environment} in the environment disagrees with the stack's output {output}={stack}")]
pub struct Conflict {
    pub variable: &'static str,
    pub environment: String,
    pub output: &'static str,
    pub stack: String,
}

/// The settings a stack's outputs give: variable name to value.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StackSettings {
    variables: BTreeMap<&'static str, String>,
}

impl StackSettings {
    /// The settings from the outputs of `stack` as (key, value) pairs. A required output that is missing is an
    /// error, unless `env` sets its variable anyway (the override makes the output unnecessary).
    pub fn from_outputs<'a>(
        stack: &str,
        outputs: impl IntoIterator<Item = (&'a str, &'a str)>,
        env: &Env,
    ) -> Result<Self, StackError> {
        let outputs: BTreeMap<&str, &str> = outputs.into_iter().filter(|(_, v)| !v.trim().is_empty()).collect();
        let mut variables = BTreeMap::new();
        for (output, variable, required) in OUTPUTS {
            match outputs.get(output) {
                Some(value) => {
                    variables.insert(variable, (*value).to_owned());
                }
                None if required && env.optional(variable).is_none() => {
                    return Err(StackError::MissingOutput {
                        stack: stack.to_owned(),
                        output,
                        variable,
                    })
                }
                None => {}
            }
        }
        Ok(Self { variables })
    }

    /// The value the stack gives `variable`, if any.
    pub fn get(&self, variable: &str) -> Option<&str> {
        self.variables.get(variable).map(String::as_str)
    }

    /// These settings over `env`: the stack's value wins; `env` gives what the stack has no output for.
    pub fn over(self, env: Env) -> Env {
        Env::from_lookup(move |name| self.variables.get(name).cloned().or_else(|| env.optional(name)))
    }

    /// The variables `env` sets to another value than the stack's output gives them.
    pub fn conflicts(&self, env: &Env) -> Vec<Conflict> {
        OUTPUTS
            .iter()
            .filter_map(|(output, variable, _)| {
                let stack = self.variables.get(variable)?;
                let environment = env.optional(variable).filter(|value| value != stack)?;
                Some(Conflict {
                    variable,
                    environment,
                    output,
                    stack: stack.clone(),
                })
            })
            .collect()
    }
}

/// Reads `stack`'s outputs (`DescribeStacks`) and turns them into settings under `env`.
pub async fn read(
    cloudformation: &aws_sdk_cloudformation::Client,
    stack: &str,
    env: &Env,
) -> Result<StackSettings, crate::Error> {
    let out = cloudformation
        .describe_stacks()
        .stack_name(stack)
        .send()
        .await
        .map_err(|e| {
            // CloudFormation answers a stack it does not know with a ValidationError, not a "not found" code.
            let missing = aws_sdk_cloudformation::error::ProvideErrorMetadata::message(&e)
                .is_some_and(|m| m.contains("does not exist"));
            if missing {
                StackError::NotFound {
                    stack: stack.to_owned(),
                }
                .into()
            } else {
                crate::aws_error("DescribeStacks", e)
            }
        })?;
    let found = out.stacks().first().ok_or_else(|| StackError::NotFound {
        stack: stack.to_owned(),
    })?;
    let outputs = found
        .outputs()
        .iter()
        .filter_map(|o| Some((o.output_key()?, o.output_value()?)));
    Ok(StackSettings::from_outputs(stack, outputs, env)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployed() -> Vec<(&'static str, &'static str)> {
        vec![
            ("PaymentsTableName", "payments-prod"),
            ("EventsQueueUrl", "https://sqs/events.fifo"),
            ("EventsDlqUrl", "https://sqs/events-dlq.fifo"),
            ("SagaEscalationQueueUrl", "https://sqs/escalations"),
            ("IntakeLogGroupName", "/aws/lambda/payments-prod-webhook-intake"),
            ("OpenItemsShards", "16"),
            ("ApiUrl", "https://api"),
        ]
    }

    #[test]
    fn every_output_becomes_its_variable_and_the_stack_wins_over_a_disagreeing_variable() {
        let env = Env::from_lookup(|n| (n == "QUEUE_URL").then(|| "https://sqs/other.fifo".to_owned()));
        let settings = StackSettings::from_outputs("payments-prod", deployed(), &env).unwrap();
        assert_eq!(settings.get("TABLE_NAME"), Some("payments-prod"));
        assert_eq!(
            settings.get("INTAKE_LOG_GROUP"),
            Some("/aws/lambda/payments-prod-webhook-intake")
        );
        assert_eq!(
            settings.get("OPEN_ITEMS_SHARDS"),
            Some("16"),
            "doctor asks the stack's shards"
        );
        assert_eq!(
            settings.get("ApiUrl"),
            None,
            "outputs paymentsctl does not use are not variables"
        );
        assert_eq!(
            settings.conflicts(&env),
            [Conflict {
                variable: "QUEUE_URL",
                environment: "https://sqs/other.fifo".into(),
                output: "EventsQueueUrl",
                stack: "https://sqs/events.fifo".into(),
            }]
        );
        let merged = settings.over(env);
        assert_eq!(merged.optional("QUEUE_URL").as_deref(), Some("https://sqs/events.fifo"));
        assert_eq!(
            merged.optional("DLQ_URL").as_deref(),
            Some("https://sqs/events-dlq.fifo")
        );
        assert_eq!(
            merged.optional("ESCALATION_QUEUE_URL").as_deref(),
            Some("https://sqs/escalations")
        );
        assert_eq!(merged.optional("TABLE_NAME").as_deref(), Some("payments-prod"));
    }

    #[test]
    fn a_stack_without_the_table_output_is_an_error_naming_it_unless_the_variable_is_set() {
        let outputs = deployed().into_iter().filter(|(k, _)| *k != "PaymentsTableName");
        let err = StackSettings::from_outputs("old", outputs.clone(), &Env::from_lookup(|_| None)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "stack old has no output PaymentsTableName (deploy infra/template.yaml, or set TABLE_NAME)"
        );
        let env = Env::from_lookup(|n| (n == "TABLE_NAME").then(|| "t".to_owned()));
        let settings = StackSettings::from_outputs("old", outputs, &env).unwrap();
        assert_eq!(
            settings.conflicts(&env),
            [],
            "a variable the stack has no output for is no conflict"
        );
        assert_eq!(settings.over(env).optional("TABLE_NAME").as_deref(), Some("t"));
    }

    #[test]
    fn an_older_stack_without_the_log_group_output_leaves_it_unset() {
        let outputs = deployed().into_iter().filter(|(k, _)| *k != "IntakeLogGroupName");
        let settings = StackSettings::from_outputs("s", outputs, &Env::from_lookup(|_| None)).unwrap();
        assert_eq!(
            settings.over(Env::from_lookup(|_| None)).optional("INTAKE_LOG_GROUP"),
            None
        );
    }

    #[test]
    fn every_output_read_here_is_one_the_template_declares() {
        let template = include_str!("../../../infra/template.yaml");
        let outputs = template.split("\nOutputs:\n").nth(1).expect("the template has Outputs");
        for (output, _, _) in OUTPUTS {
            assert!(
                outputs.contains(&format!("\n  {output}:\n")) || outputs.starts_with(&format!("  {output}:\n")),
                "infra/template.yaml has no output {output}"
            );
        }
    }
}
