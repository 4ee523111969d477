//! The HTTP API's side of the triggers: an `HttpApi` event (a route, with its auth: its own `Authorizer`, else
//! its API's `DefaultAuthorizer`) and the API's settings the front plays (each route's throttling).

use super::reader::Reader;
use crate::template::{Scope, Stack, Template};
use serde_yaml_ng::Value;

/// The properties of an `HttpApi` event: anything else is refused by name.
const PROPERTIES: &[&str] = &["ApiId", "Method", "Path", "Auth"];

/// Whether an HTTP API route needs a SigV4-signed caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteAuth {
    /// The API's `DefaultAuthorizer: AWS_IAM`.
    Iam,
    /// `Auth: {Authorizer: NONE}`: public.
    None,
}

/// An `HttpApi` event: the route (`Method` and `Path` as API Gateway matches them) and its auth.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiRoute {
    pub method: String,
    pub path: String,
    pub auth: RouteAuth,
}

/// API Gateway's throttling of a route: a token bucket of `burst` requests refilled at `rate` a second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Throttle {
    pub rate: f64,
    pub burst: u64,
}

/// An `AWS::Serverless::HttpApi`'s settings the front plays: each route's throttling (its `RouteSettings`
/// entry, else `DefaultRouteSettings`). Its `Auth` is read with each route; its `Name`, `Description`, access
/// log and `DetailedMetricsEnabled` change nothing a caller sees.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiSettings {
    pub default: Option<Throttle>,
    /// By route key (`POST /webhooks/{provider}`).
    pub routes: Vec<(String, Throttle)>,
}

impl ApiSettings {
    /// The settings of the HTTP API `api` (a logical id) of `template` in a stack standing in as `stack`; a
    /// property it does not play is refused by name.
    pub fn read(template: &Template, api: &str, stack: &Stack) -> Result<Self, String> {
        let doc = template.doc();
        let resource = &doc["Resources"][api];
        if resource["Type"].as_str() != Some("AWS::Serverless::HttpApi") {
            return Err(format!("{api} is no AWS::Serverless::HttpApi of the template"));
        }
        let scope = Scope::new(doc, stack);
        let reader = Reader {
            doc,
            scope: &scope,
            at: api.to_owned(),
        };
        let p = &resource["Properties"];
        reader.only(
            p,
            &[
                "Name",
                "Description",
                "Auth",
                "DefaultRouteSettings",
                "RouteSettings",
                "AccessLogSettings",
            ],
        )?;
        reader.only(&p["Auth"], &["EnableIamAuthorizer", "DefaultAuthorizer"])?;
        reader.only(&p["AccessLogSettings"], &["DestinationArn", "Format"])?;
        let mut routes = Vec::new();
        for (key, settings) in p["RouteSettings"].as_mapping().into_iter().flatten() {
            let key = key.as_str().ok_or_else(|| format!("{api}: a route key is no string"))?;
            if let Some(throttle) = throttle(&reader, settings)? {
                routes.push((key.to_owned(), throttle));
            }
        }
        Ok(Self {
            default: throttle(&reader, &p["DefaultRouteSettings"])?,
            routes,
        })
    }

    /// The throttling of the route `method path`.
    #[must_use]
    pub fn throttle(&self, method: &str, path: &str) -> Option<Throttle> {
        let key = format!("{method} {path}");
        self.routes
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, t)| *t)
            .or(self.default)
    }
}

/// An `HttpApi` event's properties `p`: its auth is its own `Authorizer`, or else its API's
/// `DefaultAuthorizer` (none: public).
pub(crate) fn event(reader: &Reader<'_>, p: &Value) -> Result<ApiRoute, String> {
    reader.only(p, PROPERTIES)?;
    let api = reader.logical_id(&p["ApiId"], "ApiId")?;
    reader.only(&p["Auth"], &["Authorizer"])?;
    let default = &reader.doc["Resources"][api.as_str()]["Properties"]["Auth"]["DefaultAuthorizer"];
    let authorizer = match reader.text(&p["Auth"]["Authorizer"])? {
        Some(own) => Some(own),
        None => reader.text(default)?,
    };
    let auth = match authorizer.as_deref() {
        Some("AWS_IAM") => RouteAuth::Iam,
        None | Some("NONE") => RouteAuth::None,
        Some(other) => return Err(format!("{}: the authorizer {other} is not emulated locally", reader.at)),
    };
    Ok(ApiRoute {
        method: reader.needed(&p["Method"], "Method")?,
        path: reader.needed(&p["Path"], "Path")?,
        auth,
    })
}

/// A route's `ThrottlingRateLimit` and `ThrottlingBurstLimit` (both, or neither: no throttling).
fn throttle(reader: &Reader<'_>, settings: &Value) -> Result<Option<Throttle>, String> {
    reader.only(
        settings,
        &["ThrottlingRateLimit", "ThrottlingBurstLimit", "DetailedMetricsEnabled"],
    )?;
    let rate = reader.text(&settings["ThrottlingRateLimit"])?;
    let burst = reader.count(&settings["ThrottlingBurstLimit"])?;
    match (rate, burst) {
        (None, None) => Ok(None),
        (Some(rate), Some(burst)) => {
            let rate = rate
                .parse()
                .map_err(|_| format!("{}: ThrottlingRateLimit {rate} is no number", reader.at))?;
            Ok(Some(Throttle { rate, burst }))
        }
        _ => Err(format!(
            "{}: a throttle needs both ThrottlingRateLimit and ThrottlingBurstLimit here",
            reader.at
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_http_apis_throttling_is_read_per_route() {
        let template = Template::from_repo().expect("infra/template.yaml");
        let api = ApiSettings::read(&template, "HttpApi", &Stack::default()).expect("HttpApi");
        assert_eq!(
            api.throttle("GET", "/payments/{id}"),
            Some(Throttle {
                rate: 100.0,
                burst: 200
            })
        );
        assert_eq!(
            api.throttle("POST", "/webhooks/{provider}"),
            Some(Throttle { rate: 50.0, burst: 100 })
        );
        let mut cors = Template::from_repo().expect("infra/template.yaml");
        cors.doc_mut()["Resources"]["HttpApi"]["Properties"]["CorsConfiguration"] = Value::from(true);
        let err = ApiSettings::read(&cors, "HttpApi", &Stack::default()).expect_err("CorsConfiguration");
        assert!(
            err.contains("HttpApi: the property CorsConfiguration is not emulated"),
            "{err}"
        );
    }
}
