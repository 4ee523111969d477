//! The template's functions, each as Lambda runs it: its own pool of processes of the binary `sam build`
//! packages (built for this host), with exactly the environment the template gives it (plus the local world's
//! `--set`s), its `Timeout` and `ReservedConcurrentExecutions`, cold-started once at the start so a function
//! that refuses its configuration stops the start with its own error; its output into its own log file, the
//! console getting its errors and warnings.

use crate::settings::Settings;
use local_lambda::console::{Console, FunctionLog};
use local_lambda::function_pool::{FunctionPool, FunctionSpec};
use local_lambda::template::{Stack, Template};
use local_lambda::triggers::FunctionTriggers;
use std::sync::Arc;

type Error = Box<dyn std::error::Error + Send + Sync>;

/// One function of the stack, started.
pub struct Function {
    /// Its logical id (`WebhookIntakeFunction`).
    pub name: String,
    /// Its binary's name (`webhook-intake`), which also names its AWS calls' records.
    pub binary: String,
    pub pool: Arc<FunctionPool>,
    pub triggers: FunctionTriggers,
}

/// Every function the template puts in this stack (its `Condition` holds), started; an error naming the
/// function whose trigger the local world cannot emulate, whose binary is missing or whose cold start fails.
pub async fn start(
    template: &Template,
    stack: &Stack,
    settings: &Settings,
    console: &Console,
) -> Result<Vec<Function>, Error> {
    let mut started = Vec::new();
    for name in template.functions() {
        let Some(triggers) = FunctionTriggers::read(template, &name, stack)? else {
            println!("{name}: not in this stack (its Condition is false)");
            continue;
        };
        let binary = template.binary(&name)?;
        let log = FunctionLog::create(&settings.logs, &name, console.clone())
            .map_err(|e| format!("{name}: its log in {}: {e}", settings.logs.display()))?;
        let path = log.path().to_owned();
        let pool = Arc::new(FunctionPool::new(spec(
            template, stack, settings, &name, &binary, &triggers, log,
        )?));
        if let Err(report) = pool.start().await? {
            let log = path.display();
            return Err(
                format!("{name} failed its cold start: {report} (its errors are above, its log in {log})").into(),
            );
        }
        println!("{name}: started ({binary}, timeout {:?})", triggers.timeout);
        started.push(Function {
            name,
            binary,
            pool,
            triggers,
        });
    }
    Ok(started)
}

/// What runs `name`: its host binary, the template's environment with the `--set`s over it, its limits.
fn spec(
    template: &Template,
    stack: &Stack,
    settings: &Settings,
    name: &str,
    binary: &str,
    triggers: &FunctionTriggers,
    log: Arc<FunctionLog>,
) -> Result<FunctionSpec, Error> {
    let path = settings.binaries.join(binary);
    if !path.is_file() {
        return Err(format!("{name}: no binary {} (cargo build --bin {binary})", path.display()).into());
    }
    let mut environment = template.environment(name, stack)?;
    environment.extend(settings.sets.iter().cloned());
    Ok(FunctionSpec {
        name: name.to_owned(),
        command: vec![path.into_os_string()],
        environment: environment.into_iter().collect(),
        timeout: triggers.timeout,
        reserved: triggers.reserved,
        log: Some(log),
    })
}
