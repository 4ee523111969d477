//! Operator commands, safe to run twice (consumers apply each event once):
//!
//!     replay payment <payment id>            republish one payment's events, in version order
//!     replay range <from epoch ms> <to epoch ms>   republish every event recorded in [from, to)
//!     replay redrive-dlq <dlq url>           move the DLQ's messages back to QUEUE_URL
//!
//! Reads TABLE_NAME, QUEUE_URL and the SDK's own variables (AWS_ENDPOINT_URL_DYNAMODB, AWS_ENDPOINT_URL_SQS).

use outbox_relay::{redrive_dlq, replay_payment, replay_range, Publisher};
use shared::{aws, PaymentId, PaymentStore};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let sdk = aws::sdk_config().await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let queue_url = std::env::var("QUEUE_URL").map_err(|_| "QUEUE_URL is not set")?;
    let table = || std::env::var("TABLE_NAME").map_err(|_| "TABLE_NAME is not set");
    let publisher = Publisher::new(sqs.clone(), &queue_url);
    let n = match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["payment", id] => {
            let store = PaymentStore::new(aws::dynamodb_client(&sdk), table()?);
            replay_payment(&store, &publisher, &PaymentId::parse(*id)?).await?
        }
        ["range", from, to] => {
            let store = PaymentStore::new(aws::dynamodb_client(&sdk), table()?);
            replay_range(&store, &publisher, from.parse()?, to.parse()?).await?
        }
        ["redrive-dlq", dlq] => redrive_dlq(&sqs, dlq, &queue_url).await?,
        _ => return Err("usage: replay payment <id> | range <from ms> <to ms> | redrive-dlq <dlq url>".into()),
    };
    println!("{n} messages published");
    Ok(())
}
