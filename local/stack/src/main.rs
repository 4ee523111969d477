//! The whole system on one machine, as `infra/template.yaml` deploys it (docs/LOCAL.md).
//!
//! It reads the template and runs each function as Lambda does: its own processes of the binary `sam build`
//! packages (built for this host) speaking the Lambda Runtime API, cold-started, its `Timeout` enforced and its
//! `ReservedConcurrentExecutions` honoured (`functions`); with exactly the environment the template gives it:
//! `Globals` and its own variables, the parameters of a samconfig environment and the command line over their
//! defaults, each resource replaced by its local counterpart (the table in DynamoDB Local, the queues and the
//! secrets in moto: `local_lambda::world`); triggered as the template declares (`wiring`): the HTTP API's routes
//! with their auth and throttling on 127.0.0.1:`LOCAL_API_PORT`, the table's stream mapping, the SQS mappings,
//! the schedules with Lambda's asynchronous retries. A trigger it cannot emulate, or a function whose cold
//! start fails, stops the start naming it.
//!
//! Its departures from AWS are two, both chosen on the command line and printed: `--set VARIABLE=value`
//! (shorter waits for the tests) and `--time-scale N` (schedules N times as often).
//!
//! Its terminal stays quiet while the world idles: each function's log goes to its own file under `--logs`
//! (its log group here), and this process's output is what it started, the requests (one line each) and
//! the functions' errors and warnings, named (`local_lambda::console`).

use local_lambda::console::Console;
use local_lambda::template::Template;
use std::net::SocketAddr;
use tokio::net::TcpListener;

mod clients;
mod functions;
mod settings;
mod wiring;

type Error = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let settings = settings::Settings::read()?;
    let template = Template::from_repo()?;
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let stack = local_lambda::world::create(&sdk, &settings.table, &settings.parameters).await?;
    announce(&settings);
    let console = Console::stdout();
    let functions = functions::start(&template, &stack, &settings, &console).await?;
    let clients = clients::MappingClients::new(&sdk);
    let world = wiring::World {
        stack: &stack,
        clients: &clients,
        settings: &settings,
    };
    let routes = wiring::start(&template, &world, &functions)?;
    let addr = SocketAddr::from(([127, 0, 0, 1], settings.port));
    let listener = TcpListener::bind(addr).await?;
    println!("local API on http://{addr} (table {})", settings.table);
    local_lambda::http_api::serve(listener, routes, console).await;
    Ok(())
}

/// `value` as the start prints it: a secret given by `--set` (against the template, which takes secrets by
/// ARN) is named, never shown.
fn shown<'a>(name: &str, value: &'a str) -> &'a str {
    let secret = ["KEY", "SECRET", "TOKEN", "PASSWORD"].iter().any(|s| name.contains(s));
    if secret {
        "(not shown)"
    } else {
        value
    }
}

/// Says what the world runs with: the parameters given and every departure from the template.
fn announce(settings: &settings::Settings) {
    for (name, value) in &settings.parameters {
        println!("parameter {name}={value}");
    }
    for (name, value) in &settings.sets {
        println!("not as deployed: every function gets {name}={}", shown(name, value));
    }
    if settings.time_scale > 1 {
        println!("not as deployed: schedules run {} times as often", settings.time_scale);
    }
    println!(
        "each function's log: {}/<LogicalId>.log; here only the requests and the functions' errors and warnings",
        settings.logs.display()
    );
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_secret_given_by_set_is_never_printed() {
        assert_eq!(super::shown("PSP_API_KEY", "sk_test_abc"), "(not shown)");
        assert_eq!(
            super::shown("WEBHOOK_SECRETS", "{\"stripe\":[\"whsec_x\"]}"),
            "(not shown)"
        );
        assert_eq!(super::shown("SAGA_STUCK_AFTER_SECONDS", "10"), "10");
    }
}
