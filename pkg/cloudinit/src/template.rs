//! The `## template: jinja` header: render a small, documented set of variables, reject everything else.
//!
//! Real cloud-init renders the whole user-data with Jinja against its instance data before parsing YAML.
//! We support exactly the part CAPI templates use: `{{ name }}` where `name` is a dotted variable set in
//! [`TemplateVars`], and `{# comments #}` (removed). Anything else — an undefined variable, filters
//! (`{{ x | lower }}`), whitespace control (`{{- x }}`), statements (`{% if %}`) — is an error naming the line
//! and the expression, never a silent pass-through.

use std::collections::BTreeMap;

use crate::error::{Error, Result};

/// Variables available to `## template: jinja` payloads.
///
/// The setters fill cloud-init's names for the same datum, so templates written for a cloud keep working:
///
/// | setter | names |
/// |---|---|
/// | [`local_hostname`](Self::local_hostname) | `ds.meta_data.local_hostname`, `v1.local_hostname` |
/// | [`instance_id`](Self::instance_id) | `ds.meta_data.instance_id`, `v1.instance_id` |
/// | [`provider_id`](Self::provider_id) | `ds.meta_data.provider_id` |
/// | [`set`](Self::set) | any other dotted name, e.g. `ds.meta_data.uuid` |
///
/// Values are inserted verbatim (no escaping), as Jinja does.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct TemplateVars {
    values: BTreeMap<String, String>,
}

impl std::fmt::Debug for TemplateVars {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.values.keys()).finish()
    }
}

impl TemplateVars {
    /// No variables: any `{{ ... }}` in a Jinja payload is an error.
    pub fn new() -> Self {
        Self::default()
    }

    /// The host's name (`ds.meta_data.local_hostname`, `v1.local_hostname`).
    pub fn local_hostname(self, value: impl Into<String>) -> Self {
        let v = value.into();
        self.set("ds.meta_data.local_hostname", v.clone())
            .set("v1.local_hostname", v)
    }

    /// The instance id (`ds.meta_data.instance_id`, `v1.instance_id`).
    pub fn instance_id(self, value: impl Into<String>) -> Self {
        let v = value.into();
        self.set("ds.meta_data.instance_id", v.clone())
            .set("v1.instance_id", v)
    }

    /// The machine's provider ID (`ds.meta_data.provider_id`).
    pub fn provider_id(self, value: impl Into<String>) -> Self {
        self.set("ds.meta_data.provider_id", value)
    }

    /// Any other variable by its full dotted name.
    pub fn set(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.values.insert(name.into(), value.into());
        self
    }

    /// The value of a variable.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    /// Names of all defined variables.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.values.keys().map(String::as_str)
    }
}

/// True when the first line is cloud-init's Jinja header (`## template: jinja`, case-insensitive).
pub(crate) fn has_jinja_header(first_line: &str) -> Result<bool> {
    let line = first_line.trim();
    let Some(rest) = line.strip_prefix("##") else {
        return Ok(false);
    };
    let rest = rest.trim_start();
    let Some(kind) = rest
        .get(..9)
        .filter(|p| p.eq_ignore_ascii_case("template:"))
        .map(|_| &rest[9..])
    else {
        return Ok(false);
    };
    let kind = kind.trim().to_ascii_lowercase();
    if kind == "jinja" {
        Ok(true)
    } else {
        Err(Error::RenderTemplate {
            line: 1,
            message: format!("template type {kind:?} is not supported (only jinja)"),
        })
    }
}

/// Render `text` (the payload without its header line); `first_line` is the 1-based line of `text`.
pub(crate) fn render(text: &str, vars: &TemplateVars, first_line: usize) -> Result<String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut consumed = 0usize;
    let line_at = |offset: usize| first_line + text[..offset].matches('\n').count();
    while let Some(pos) = rest.find('{') {
        let after = &rest[pos..];
        let open = if after.starts_with("{{") {
            "{{"
        } else if after.starts_with("{%") {
            "{%"
        } else if after.starts_with("{#") {
            "{#"
        } else {
            out.push_str(&rest[..pos + 1]);
            consumed += pos + 1;
            rest = &rest[pos + 1..];
            continue;
        };
        let line = line_at(consumed + pos);
        out.push_str(&rest[..pos]);
        let close = match open {
            "{{" => "}}",
            "{%" => "%}",
            _ => "#}",
        };
        let Some(end) = after[2..].find(close) else {
            return Err(Error::RenderTemplate {
                line,
                message: format!("`{open}` is never closed with `{close}`"),
            });
        };
        let inner = &after[2..2 + end];
        match open {
            "{%" => {
                return Err(Error::RenderTemplate {
                    line,
                    message: format!("jinja statements are not supported: `{{%{}%}}`", short(inner)),
                });
            }
            "{#" => {}
            _ => out.push_str(lookup(inner, vars, line)?),
        }
        let skip = pos + 2 + end + 2;
        consumed += skip;
        rest = &rest[skip..];
    }
    out.push_str(rest);
    Ok(out)
}

fn lookup<'v>(inner: &str, vars: &'v TemplateVars, line: usize) -> Result<&'v str> {
    let name = inner.trim();
    let valid = !name.is_empty()
        && name.split('.').all(|part| {
            let mut chars = part.chars();
            matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        });
    if !valid {
        return Err(Error::RenderTemplate {
            line,
            message: format!(
                "unsupported jinja expression `{{{{{}}}}}`: only plain variables such as \
                 `{{{{ ds.meta_data.local_hostname }}}}` are rendered",
                short(inner)
            ),
        });
    }
    vars.get(name).ok_or_else(|| {
        let defined: Vec<&str> = vars.names().collect();
        Error::RenderTemplate {
            line,
            message: format!(
                "variable `{name}` is not defined (defined: {})",
                if defined.is_empty() {
                    "none".to_owned()
                } else {
                    defined.join(", ")
                }
            ),
        }
    })
}

/// At most 60 characters of an expression, for error messages.
fn short(s: &str) -> String {
    let s = s.trim();
    if s.chars().count() > 60 {
        format!("{}...", s.chars().take(60).collect::<String>())
    } else {
        s.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> TemplateVars {
        TemplateVars::new()
            .local_hostname("node-1")
            .instance_id("i-1")
            .provider_id("kk://ns/h1")
    }

    #[test]
    fn renders_documented_variables_with_any_spacing() {
        let out = render(
            "name: {{ ds.meta_data.local_hostname }}\nid: {{v1.instance_id}}\np: {{  ds.meta_data.provider_id }}\n",
            &vars(),
            2,
        )
        .unwrap();
        assert_eq!(out, "name: node-1\nid: i-1\np: kk://ns/h1\n");
    }

    #[test]
    fn removes_comments_and_keeps_single_braces() {
        let out = render("a: {x}\n{# note #}b: 1\n", &vars(), 2).unwrap();
        assert_eq!(out, "a: {x}\nb: 1\n");
    }

    #[test]
    fn undefined_variable_is_named_with_its_line() {
        let err = render("a: 1\nb: {{ ds.meta_data.uuid }}\n", &vars(), 2).unwrap_err();
        let Error::RenderTemplate { line, message } = err else {
            panic!("wrong error")
        };
        assert_eq!(line, 3);
        assert!(message.contains("ds.meta_data.uuid"), "{message}");
    }

    #[test]
    fn statements_filters_and_unclosed_tags_are_rejected() {
        for bad in [
            "{% if x %}a{% endif %}",
            "{{ ds.meta_data.local_hostname | upper }}",
            "{{- x }}",
            "{{ x",
        ] {
            assert!(
                matches!(render(bad, &vars(), 2), Err(Error::RenderTemplate { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn header_detection_follows_cloud_init() {
        assert!(has_jinja_header("## template: jinja").unwrap());
        assert!(has_jinja_header("##template:JINJA  ").unwrap());
        assert!(!has_jinja_header("#cloud-config").unwrap());
        assert!(has_jinja_header("## template: basic").is_err());
    }
}
