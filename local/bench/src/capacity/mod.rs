//! `bench capacity`: the capacity model (issue 44). For a deployment (a samconfig environment's parameters
//! over `infra/template.yaml`'s defaults) and a load profile, it prints each resource's demand against its
//! limit, the headroom, the first limit that binds and the highest sustainable rate. It reads three things
//! and holds no figure of its own: the per-request costs the bench measured (`benchmarks/costs.json`,
//! [`crate::costs`]), the template's settings ([`deployment`]) and the limits table ([`limits`]). The
//! arithmetic is [`model`]'s; [`report`] writes it as markdown.
//!
//! `bench capacity [--config-env ENV] [--profile NAME] [--set field=value ...] [Parameter=value ...]`;
//! `bench capacity --results` writes the default deployment's and the peak environment's answers into
//! `benchmarks/RESULTS.md`; `bench limits` prints the limits table as docs/CAPACITY.md shows it.

pub mod deployment;
pub mod limits;
pub mod model;
pub mod profile;
pub mod report;

use local_lambda::template::Template;
use model::{Answer, Inputs};
use profile::Profile;

/// The samconfig environment sized for the peak (issue 44's item 3), when it exists.
pub const PEAK_ENV: &str = "peak";

/// The command line of `bench capacity`.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Args {
    pub config_env: Option<String>,
    pub profile: String,
    pub sets: Vec<(String, String)>,
    pub parameters: Vec<(String, String)>,
    pub results: bool,
}

/// Reads `bench capacity`'s arguments (after the subcommand).
pub fn parse(args: &[String]) -> Result<Args, String> {
    let mut out = Args {
        profile: "peak".into(),
        ..Args::default()
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = || it.next().cloned().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--config-env" => out.config_env = Some(value()?),
            "--profile" => out.profile = value()?,
            "--set" => out.sets.push(pair(&value()?)?),
            "--results" => out.results = true,
            word => out.parameters.push(pair(word)?),
        }
    }
    Ok(out)
}

fn pair(word: &str) -> Result<(String, String), String> {
    word.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("{word}: not key=value"))
}

/// The named profile with `sets` applied (`orders_per_s=500`).
pub fn profile(name: &str, sets: &[(String, String)]) -> Result<Profile, String> {
    let profiles = profile::load(&profile::path())?;
    let base = profiles
        .get(name)
        .ok_or_else(|| format!("no profile {name} in benchmarks/load-profiles.toml"))?;
    let mut table = toml::Table::try_from(base).map_err(|e| e.to_string())?;
    for (key, value) in sets {
        let number: f64 = value
            .parse()
            .map_err(|_| format!("--set {key}={value}: not a number"))?;
        table.insert(key.clone(), toml::Value::Float(number));
    }
    table.try_into().map_err(|e| format!("--set: {e}"))
}

/// One answer of the model: the deployment of `env` with `parameters`, at `profile`.
pub fn run(env: Option<&str>, parameters: &[(String, String)], profile: &Profile) -> Result<(Answer, String), String> {
    let template = Template::from_repo()?;
    let deployment = deployment::read(&template, env, parameters)?;
    let costs = crate::costs::load(&crate::costs::path())?;
    let limits = limits::for_deployment(env)?;
    let inputs = Inputs {
        costs: &costs,
        deployment: &deployment,
        limits: &limits,
        profile,
    };
    let answer = model::answer(&inputs)?;
    let text = report::markdown(&inputs, &answer);
    Ok((answer, text))
}

/// `bench capacity`: prints the answer, or with `--results` writes both deployments' into RESULTS.md.
pub fn command(args: &[String]) -> Result<(), String> {
    let args = parse(args)?;
    let profile = profile(&args.profile, &args.sets)?;
    if !args.results {
        let (_, text) = run(args.config_env.as_deref(), &args.parameters, &profile)?;
        print!("{text}");
        return Ok(());
    }
    let mut section = report::results_head(&args.profile);
    let (_, default) = run(None, &[], &profile)?;
    section.push_str(&default);
    let peak_exists = local_lambda::template::samconfig_parameters(
        &local_testkit::service::repo_root().join("samconfig.toml"),
        PEAK_ENV,
    )?
    .contains_key("Stage");
    if peak_exists {
        let (_, peak) = run(Some(PEAK_ENV), &[], &profile)?;
        section.push_str(&peak);
    }
    print!("{section}");
    report::replace_in_results("capacity", &section)
}

#[cfg(test)]
mod tests;
