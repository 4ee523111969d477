//! The model's answer as markdown, and the one way a generated section goes into `benchmarks/RESULTS.md`:
//! between its markers (`<!-- bench NAME -->` ... `<!-- /bench NAME -->`), replaced in place, appended at
//! the end the first time. `scripts/bench` rewrites the file above its hand-written "## Experiments" part and
//! keeps everything from there on, so these sections, kept after it, survive a full bench run.

use super::limits::group_thousands;
use super::model::{Answer, Inputs, Row};
use std::fmt::Write;

/// The head of the capacity section in RESULTS.md.
pub fn results_head(profile: &str) -> String {
    format!(
        "## Capacity model (`bench capacity --results`, profile `{profile}`)\n\n\
         Each resource's demand at the profile's rate against its limit, from the per-request costs of \
         `benchmarks/costs.json`, the template's settings at the deployment's parameters and \
         `benchmarks/limits.toml` (rendered in docs/CAPACITY.md). \"sustains\" is the highest orders/s the \
         resource carries; the first limit that binds is the lowest. Rows marked $ delay or refuse money's news \
         when they bind (a throttled write or webhook, a PSP 429).\n\n"
    )
}

/// One deployment's answer.
pub fn markdown(inputs: &Inputs<'_>, answer: &Answer) -> String {
    let (d, p, c) = (inputs.deployment, inputs.profile, inputs.costs);
    let r = p.orders_per_s;
    let mut out = format!("### {} at {} orders/s\n\n", d.name, group_thousands(r));
    let given: Vec<String> = d.parameters.iter().map(|(k, v)| format!("{k}={v}")).collect();
    writeln!(
        out,
        "Parameters over the template's defaults: {}. Costs: `{}` of {} (a new webhook {} WCU + {} index, \
         {} RCU; the intake's MemorySize {} MB, its times measured on this machine against DynamoDB Local, upper bounds). {} webhook deliveries per \
         order.\n",
        if given.is_empty() {
            "none".into()
        } else {
            format!("`{}`", given.join(" "))
        },
        c.measured_by,
        c.measured_on,
        c.webhooks.get("new").map_or(0.0, |w| w.wcu),
        c.webhooks.get("new").map_or(0.0, |w| w.index_units),
        c.webhooks.get("new").map_or(0.0, |w| w.rcu),
        d.intake_memory_mb,
        group_thousands(p.deliveries_per_order()),
    )
    .ok();
    out.push_str(
        "| resource | demand | limit | limit from | headroom | sustains (orders/s) |\n|---|---|---|---|---|---|\n",
    );
    for row in &answer.rows {
        out.push_str(&line(row, r));
    }
    match answer.binding() {
        Some(b) => writeln!(
            out,
            "\n**First binding limit: {}** ({} {}). **Sustainable rate: {} orders/s**; at {} orders/s its \
             headroom is {}.\n",
            b.resource,
            group_thousands(b.limit),
            b.unit,
            group_thousands(answer.sustainable().floor()),
            group_thousands(r),
            percent(b.headroom(r)),
        ),
        None => writeln!(out, "\nNo resource grows with the orders.\n"),
    }
    .ok();
    let budgets = &answer.budgets;
    writeln!(
        out,
        "**Stripe budgets** (every function that calls Stripe, whatever the traffic): {}/s together against \
         the account's {}/s{}.\n",
        group_thousands(budgets.sum),
        group_thousands(budgets.limit),
        if budgets.flags.is_empty() {
            ", under it".to_owned()
        } else {
            format!("; flagged: {}", budgets.flags.join("; "))
        }
    )
    .ok();
    for note in &answer.notes {
        writeln!(out, "- {note}").ok();
    }
    if !answer.notes.is_empty() {
        out.push('\n');
    }
    out
}

fn line(row: &Row, r: f64) -> String {
    let money = if row.money { " $" } else { "" };
    let sustains = row.max_orders_per_s();
    let sustains = if sustains.is_finite() {
        group_thousands(sustains.floor())
    } else {
        "any".into()
    };
    format!(
        "| {}{money} | {} {} | {} | {} | {} | {sustains} |\n",
        row.resource,
        group_thousands((row.demand(r) * 10.0).round() / 10.0),
        row.unit,
        group_thousands(row.limit),
        row.limit_from,
        percent(row.headroom(r)),
    )
}

/// `0.319` as `31 %`, a negative headroom as `over by 120 %`: rounded towards less headroom, never
/// overstating it.
pub fn percent(share: f64) -> String {
    if share < 0.0 {
        format!("over by {:.0} %", (-share * 100.0).ceil())
    } else {
        format!("{:.0} %", (share * 100.0 + 1e-9).floor())
    }
}

/// `text` with the section `name` (between its markers) replaced by `section`, or appended.
pub fn replace_section(text: &str, name: &str, section: &str) -> String {
    let (open, close) = (format!("<!-- bench {name} -->"), format!("<!-- /bench {name} -->"));
    let block = format!("{open}\n{section}{close}");
    match (text.find(&open), text.find(&close)) {
        (Some(start), Some(end)) if end > start => {
            format!("{}{block}{}", &text[..start], &text[end + close.len()..])
        }
        _ => format!("{}\n\n{block}\n", text.trim_end()),
    }
}

/// Writes `section` as the section `name` of `benchmarks/RESULTS.md`.
pub fn replace_in_results(name: &str, section: &str) -> Result<(), String> {
    let path = local_testkit::service::repo_root().join("benchmarks/RESULTS.md");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("read {}: {e}", path.display()))?;
    std::fs::write(&path, replace_section(&text, name, section)).map_err(|e| format!("write {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_section_is_replaced_in_place_or_appended() {
        let first = replace_section("# Results\n\n## Experiments\n", "capacity", "one\n");
        assert_eq!(
            first,
            "# Results\n\n## Experiments\n\n<!-- bench capacity -->\none\n<!-- /bench capacity -->\n"
        );
        let second = replace_section(&first, "capacity", "two\n");
        assert_eq!(second, first.replace("one", "two"));
        let both = replace_section(&second, "simulation", "sim\n");
        assert!(both.contains("two") && both.ends_with("sim\n<!-- /bench simulation -->\n"));
        assert_eq!(percent(0.319), "31 %");
        assert_eq!(percent(0.3), "30 %");
        assert_eq!(percent(-1.2), "over by 120 %");
    }
}
