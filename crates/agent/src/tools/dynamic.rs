//! The extension point for tools that are not in the static table
//! ([`super::table`]): tools discovered at run time, such as the tools of the
//! MCP servers the user configured (`mcp__<server>__<tool>`, see the `claw-mcp`
//! crate). A [`DynamicTools`] object is handed to the registry with
//! [`super::ToolRegistry::with_dynamic`]; the registry consults it only for names
//! the table does not know, so a dynamic tool can never shadow a built-in one.
//!
//! Policy: a dynamic tool says whether it is read-only
//! ([`DynamicTools::is_read_only`]); one that is not (or does not know) is a side
//! effect, gated exactly like `write_file` ([`Grant::External`] is its "always").
//! Results come back as text ([`super::ToolOutput::External`]) or as a
//! [`super::ToolError::External`], and reach the model through
//! [`super::render_for_model`] like every other tool's.

use std::future::Future;
use std::pin::Pin;

use super::policy::{Gate, Grant};
use super::{Invocation, ToolError, ToolResult};
use crate::message::ToolSpec;

/// A boxed future of a dynamic call's result.
pub type DynamicFuture<'a> = Pin<Box<dyn Future<Output = ToolResult> + Send + 'a>>;

/// Tools known only at run time. Implementations must never panic or block the
/// runtime: a failure (a crashed server, a timeout) is an `Err` for the model.
pub trait DynamicTools: Send + Sync {
    /// The tools to offer, with their JSON Schemas. Called when a session starts.
    fn specs(&self) -> Vec<ToolSpec>;
    /// `Some(read_only)` for a tool this object serves, `None` for a name it does
    /// not know.
    fn is_read_only(&self, name: &str) -> Option<bool>;
    /// Run `name` with the model's arguments (a JSON object).
    fn call<'a>(&'a self, name: &'a str, arguments: serde_json::Value) -> DynamicFuture<'a>;
}

/// A prepared call: a built-in tool's typed invocation or a dynamic tool's name
/// and arguments.
#[derive(Debug, Clone, PartialEq)]
pub enum Prepared {
    Builtin(Invocation),
    Dynamic {
        name: String,
        arguments: serde_json::Value,
    },
}

/// Parses a dynamic call's raw arguments (an empty string counts as `{}`; the
/// arguments must be a JSON object) and asks the policy: a tool that is not
/// read-only needs confirmation when `confirm` is on.
pub fn prepare(
    name: &str,
    read_only: bool,
    raw: &str,
    confirm: bool,
) -> Result<(Prepared, Gate), ToolError> {
    let arguments = super::parse_object(name, raw)?;
    let gate = if confirm && !read_only {
        Gate::Confirm(Grant::External(name.to_string()))
    } else {
        Gate::Free
    };
    Ok((
        Prepared::Dynamic {
            name: name.to_string(),
            arguments,
        },
        gate,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn side_effects_are_gated_and_arguments_must_be_an_object() {
        let (p, g) = prepare("mcp__fs__write", false, r#"{"a":1}"#, true).unwrap();
        assert_eq!(g, Gate::Confirm(Grant::External("mcp__fs__write".into())));
        assert!(matches!(p, Prepared::Dynamic { ref name, .. } if name == "mcp__fs__write"));
        let (_, g) = prepare("mcp__fs__read", true, "", true).unwrap();
        assert_eq!(g, Gate::Free);
        let (_, g) = prepare("mcp__fs__write", false, "{}", false).unwrap();
        assert_eq!(g, Gate::Free);
        assert!(matches!(
            prepare("x", true, "[1]", true),
            Err(ToolError::InvalidArguments { .. })
        ));
        assert!(matches!(
            prepare("x", true, "{nope", true),
            Err(ToolError::InvalidJson { .. })
        ));
    }

    struct Fake;

    impl DynamicTools for Fake {
        fn specs(&self) -> Vec<ToolSpec> {
            ["mcp__s__echo", "mcp__s__rm", "read_file"]
                .iter()
                .map(|n| ToolSpec {
                    name: n.to_string(),
                    description: "d".into(),
                    parameters: serde_json::json!({"type": "object"}),
                })
                .collect()
        }
        fn is_read_only(&self, name: &str) -> Option<bool> {
            match name {
                "mcp__s__echo" | "read_file" => Some(true),
                "mcp__s__rm" => Some(false),
                _ => None,
            }
        }
        fn call<'a>(&'a self, name: &'a str, arguments: serde_json::Value) -> DynamicFuture<'a> {
            Box::pin(async move {
                Ok(super::super::ToolOutput::External {
                    name: name.to_string(),
                    text: arguments.to_string(),
                })
            })
        }
    }

    #[tokio::test]
    async fn the_registry_offers_gates_and_runs_dynamic_tools_without_shadowing_builtins() {
        use super::super::{ToolContext, ToolRegistry};
        use std::sync::Arc;
        let mut ctx = ToolContext::new("/tmp");
        ctx.confirm_side_effects = true;
        let reg = ToolRegistry::new(ctx).with_dynamic(Arc::new(Fake));
        let names: Vec<String> = reg.specs().into_iter().map(|s| s.name).collect();
        assert_eq!(names.iter().filter(|n| *n == "read_file").count(), 1);
        assert!(names.contains(&"mcp__s__echo".to_string()));
        assert!(reg.is_read_only("mcp__s__echo"));
        assert!(!reg.is_read_only("mcp__s__rm"));
        assert!(reg.needs_confirmation("mcp__s__rm"));
        assert!(!reg.needs_confirmation("mcp__s__echo"));
        let call = |name: &str, args: &str| crate::message::ToolCall {
            id: "1".into(),
            name: name.into(),
            arguments: args.into(),
        };
        let (_, gate) = reg.prepare_any(&call("mcp__s__rm", "{}"), false).unwrap();
        assert_eq!(gate, Gate::Confirm(Grant::External("mcp__s__rm".into())));
        let out = reg
            .dispatch(&call("mcp__s__echo", r#"{"x":1}"#))
            .await
            .unwrap();
        assert_eq!(out.render(), r#"{"x":1}"#);
        let e = reg.dispatch(&call("mcp__s__nope", "{}")).await.unwrap_err();
        assert!(matches!(e, ToolError::UnknownTool { .. }), "{e:?}");
    }
}
