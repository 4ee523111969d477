//! A simulator served on 127.0.0.1 and our real `StripeClient` pointed at it.

use psp::{ApiKey, StripeClient, StripeSettings};
use psp_simulator::client::HttpClient;
use psp_simulator::delivery::DeliveryOptions;
use psp_simulator::ledger::{Ledger, Timings};
use psp_simulator::server::Simulator;
use shared::SigningSecret;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

pub const KEY: &str = "sk_test_rules";

pub struct Served {
    pub sim: Arc<Simulator>,
    pub url: String,
}

/// A simulator with every rule on (as always), its webhooks going nowhere.
pub async fn served() -> Served {
    let sim = Arc::new(Simulator {
        ledger: Ledger::new(KEY, Timings { slow: Duration::ZERO }, None),
        webhook_url: "http://127.0.0.1:9/webhooks/stripe".into(),
        secret: SigningSecret::parse("whsec_test").expect("secret"),
        delivery: DeliveryOptions {
            max_attempts: 1,
            ..DeliveryOptions::default()
        },
        client: HttpClient::default(),
        storm_rate: 0.0,
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(sim.clone().serve(listener));
    Served { sim, url }
}

impl Served {
    /// Our client as the functions build it locally (`StripeSettings::local`), with `key`.
    pub fn client(&self, key: &str) -> StripeClient {
        let settings = StripeSettings::local(&self.url, key).expect("settings");
        StripeClient::new(&settings, ApiKey::parse(key).expect("key")).expect("client")
    }
}

pub fn params(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}
