//! The one HTTP router: the payments API, the checkout API, the webhook intake and the local stack all find
//! their route here, on `matchit` (the router axum is built on), with the same rules everywhere:
//!
//! - a path no route has is `404`; a route asked with a method it does not serve is `405` with an `Allow`
//!   header naming every method it does serve (RFC 9110, 15.5.6);
//! - empty segments are ignored (`/payments//p1/` is `/payments/p1`), as API Gateway forwards them;
//! - a path no route has is tried once more without its first segment, an API Gateway stage name
//!   (`/prod/payments/p1`), so the same function serves `$default` and named stages;
//! - segments are not percent-decoded: the typed ids refuse `%`, so an encoded slash or NUL is a 400 from the
//!   id's parser, never a different route.

use crate::http::ApiError;
use lambda_http::http::Method;
use std::collections::BTreeMap;

/// Routes of type `K` (usually a small `Copy` enum naming the handler) by method and path pattern.
#[derive(Debug, Clone)]
pub struct Router<K> {
    paths: matchit::Router<Endpoint<K>>,
    /// The table as written, for [`Router::routes`] (matchit cannot list what it holds).
    table: Vec<(Option<Method>, String)>,
}

/// What one path pattern serves.
#[derive(Debug, Clone)]
struct Endpoint<K> {
    /// `None` for a route that takes every method (the local stack forwards to a function that decides).
    methods: Vec<(Option<Method>, K)>,
    /// The value of the `Allow` header of a 405 on this path, in alphabetical order, e.g. `GET, PUT`.
    allow: String,
}

/// A route found for a request: the route's key and the path's parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matched<K> {
    pub route: K,
    params: Vec<(String, String)>,
}

impl<K> Matched<K> {
    /// The segment the pattern named `{name}` (or `{*name}`), as sent. Empty if the pattern has no such name,
    /// which the typed id parsers then refuse.
    pub fn param(&self, name: &str) -> &str {
        self.params
            .iter()
            .find(|(key, _)| key == name)
            .map_or("", |(_, value)| value.as_str())
    }
}

/// A route table being written; [`RouterBuilder::build`] checks it.
#[derive(Debug)]
pub struct RouterBuilder<K> {
    endpoints: BTreeMap<String, Vec<(Option<Method>, K)>>,
}

/// The route table is inconsistent: two patterns that overlap, or a malformed pattern. A programming error,
/// found by each crate's unit test of its table.
pub type RouteTableError = matchit::InsertError;

impl<K: Clone> Router<K> {
    /// Starts a route table.
    pub fn builder() -> RouterBuilder<K> {
        RouterBuilder {
            endpoints: BTreeMap::new(),
        }
    }

    /// Every route of the table: its method (`None` for [`RouterBuilder::any`]) and its path pattern, by
    /// pattern. For checks that compare a table with what else names the routes (`infra/openapi.yaml`, the
    /// HTTP API's events in `infra/template.yaml`).
    pub fn routes(&self) -> &[(Option<Method>, String)] {
        &self.table
    }

    /// The route for `method` on `path`: `Ok` with the route's key and parameters, or the 404 or 405 answer.
    pub fn at(&self, method: &Method, path: &str) -> Result<Matched<K>, ApiError> {
        let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        // As sent, then once more without a first segment that may be a stage name.
        let tries = [Some(0), (segments.len() > 1).then_some(1)];
        for skip in tries.into_iter().flatten() {
            let normalized = format!("/{}", segments.get(skip..).unwrap_or_default().join("/"));
            if let Ok(found) = self.paths.at(&normalized) {
                return Self::choose(method, found);
            }
        }
        Err(ApiError::not_found(format!("no route for {}", shown(path))))
    }

    fn choose(method: &Method, found: matchit::Match<'_, '_, &Endpoint<K>>) -> Result<Matched<K>, ApiError> {
        let endpoint = found.value;
        let route = endpoint
            .methods
            .iter()
            .find(|(m, _)| m.as_ref().is_none_or(|m| m == method))
            .map(|(_, route)| route.clone())
            .ok_or_else(|| {
                ApiError::method_not_allowed(format!("{method} is not allowed here; use {}", endpoint.allow))
                    .with_allow(&endpoint.allow)
            })?;
        let params = found
            .params
            .iter()
            .map(|(key, value)| (key.to_owned(), value.to_owned()))
            .collect();
        Ok(Matched { route, params })
    }
}

impl<K> RouterBuilder<K> {
    /// `method` on `pattern` (matchit syntax: `/payments/{id}/events`, `/payments/{*rest}`) goes to `route`.
    pub fn route(mut self, method: Method, pattern: &str, route: K) -> Self {
        self.endpoints
            .entry(pattern.to_owned())
            .or_default()
            .push((Some(method), route));
        self
    }

    /// Every method on `pattern` goes to `route` (for a dispatcher whose target answers 405 itself).
    pub fn any(mut self, pattern: &str, route: K) -> Self {
        self.endpoints
            .entry(pattern.to_owned())
            .or_default()
            .push((None, route));
        self
    }

    /// The router, or the first pattern that overlaps another or is malformed.
    pub fn build(self) -> Result<Router<K>, RouteTableError> {
        let mut paths = matchit::Router::new();
        let mut table = Vec::new();
        for (pattern, methods) in self.endpoints {
            table.extend(methods.iter().map(|(m, _)| (m.clone(), pattern.clone())));
            let mut allow: Vec<&str> = methods
                .iter()
                .filter_map(|(m, _)| m.as_ref().map(Method::as_str))
                .collect();
            allow.sort_unstable();
            let allow = allow.join(", ");
            paths.insert(pattern, Endpoint { methods, allow })?;
        }
        Ok(Router { paths, table })
    }
}

/// A path as it may appear in an answer: at most 100 characters (a hostile path can be kilobytes long).
fn shown(path: &str) -> String {
    match path.char_indices().nth(100) {
        Some((end, _)) => format!("{}...", path.get(..end).unwrap_or_default()),
        None => path.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum R {
        Create,
        Get,
        Put,
        Events,
        Forward,
    }

    fn router() -> Router<R> {
        Router::builder()
            .route(Method::POST, "/payments", R::Create)
            .route(Method::GET, "/payments/{id}", R::Get)
            .route(Method::PUT, "/payments/{id}", R::Put)
            .route(Method::GET, "/payments/{id}/events", R::Events)
            .any("/webhooks/{*rest}", R::Forward)
            .build()
            .unwrap()
    }

    #[test]
    fn finds_the_route_and_its_parameters() {
        let found = router().at(&Method::GET, "/payments/pay_1/events").unwrap();
        assert_eq!(found.route, R::Events);
        assert_eq!(found.param("id"), "pay_1");
        assert_eq!(found.param("other"), "");
        assert_eq!(router().at(&Method::PUT, "/payments/p").unwrap().route, R::Put);
    }

    #[test]
    fn ignores_empty_segments_and_one_stage_name() {
        assert_eq!(router().at(&Method::GET, "//payments/p1/").unwrap().param("id"), "p1");
        assert_eq!(router().at(&Method::POST, "/prod/payments").unwrap().route, R::Create);
        assert_eq!(router().at(&Method::GET, "/a/b/payments/p1").unwrap_err().status, 404);
    }

    #[test]
    fn a_wrong_method_is_405_naming_every_allowed_method() {
        let refused = router().at(&Method::DELETE, "/payments/p1").unwrap_err();
        assert_eq!(refused.status, 405);
        assert_eq!(refused.allow.as_deref(), Some("GET, PUT"));
        assert_eq!(
            router().at(&Method::GET, "/payments").unwrap_err().allow.as_deref(),
            Some("POST")
        );
    }

    #[test]
    fn an_unknown_path_is_404_and_a_catch_all_takes_every_method() {
        assert_eq!(router().at(&Method::GET, "/").unwrap_err().status, 404);
        assert_eq!(router().at(&Method::GET, "/payments/p1/x").unwrap_err().status, 404);
        let long = format!("/{}", "x".repeat(6000));
        assert!(router().at(&Method::GET, &long).unwrap_err().message.len() < 140);
        let found = router().at(&Method::PATCH, "/webhooks/stripe/x").unwrap();
        assert_eq!((found.route, found.param("rest")), (R::Forward, "stripe/x"));
    }

    #[test]
    fn routes_lists_the_table_as_written() {
        let table = router();
        let listed: Vec<(Option<&str>, &str)> = table
            .routes()
            .iter()
            .map(|(m, p)| (m.as_ref().map(Method::as_str), p.as_str()))
            .collect();
        assert_eq!(
            listed,
            [
                (Some("POST"), "/payments"),
                (Some("GET"), "/payments/{id}"),
                (Some("PUT"), "/payments/{id}"),
                (Some("GET"), "/payments/{id}/events"),
                (None, "/webhooks/{*rest}"),
            ]
        );
    }

    #[test]
    fn overlapping_patterns_are_refused_when_built() {
        let table = Router::builder().route(Method::GET, "/payments/{id}", R::Get).route(
            Method::GET,
            "/payments/{other}",
            R::Events,
        );
        assert!(table.build().is_err());
    }
}
