//! `--filter axis=value,…`: the one selection syntax of every command that takes a plan.
//!
//! Terms on different axes must all hold; several values for one axis
//! (`model=resnet18,model=vgg16` or `model=resnet18|vgg16`) are alternatives.

use crate::plan::Combination;
use crate::study::{AXES, Study};
use anyhow::{Result, bail};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Filter {
    terms: BTreeMap<String, Vec<String>>,
}

impl Filter {
    /// Parses `axis=value[|value…][,axis=value…]`; empty text selects everything.
    pub fn parse(text: &str) -> Result<Filter> {
        let mut terms: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for term in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let Some((axis, values)) = term.split_once('=') else {
                bail!("filter term `{term}` is not of the form axis=value");
            };
            let axis = axis.trim();
            if !AXES.contains(&axis) {
                bail!(
                    "filter names unknown axis `{axis}`; valid axes: {}",
                    AXES.join(", ")
                );
            }
            let entry = terms.entry(axis.to_string()).or_default();
            for value in values.split('|').map(str::trim) {
                if value.is_empty() {
                    bail!("filter term `{term}` has an empty value");
                }
                entry.push(value.to_string());
            }
        }
        Ok(Filter { terms })
    }

    /// This filter narrowed to `values` on `axis`: alternatives among
    /// themselves, and, where the filter already names the axis, only the
    /// values both allow. Commands that add a constraint to the user's
    /// `--filter` (`dlas run --device`, `dlas tune`) build it with this
    /// instead of joining text and parsing it again.
    pub fn require<S: Into<String>>(
        mut self,
        axis: &str,
        values: impl IntoIterator<Item = S>,
    ) -> Result<Filter> {
        if !AXES.contains(&axis) {
            bail!("unknown axis `{axis}`; valid axes: {}", AXES.join(", "));
        }
        let values: Vec<String> = values.into_iter().map(Into::into).collect();
        let narrowed = match self.terms.remove(axis) {
            Some(old) => values.into_iter().filter(|v| old.contains(v)).collect(),
            None => values,
        };
        self.terms.insert(axis.to_string(), narrowed);
        Ok(self)
    }

    /// Checks every value against the study, so a typo is an error, not an empty plan.
    pub fn check(&self, study: &Study) -> Result<()> {
        for (axis, values) in &self.terms {
            for value in values {
                study
                    .check_value(axis, value)
                    .map_err(|e| anyhow::anyhow!("in --filter: {e}"))?;
            }
        }
        Ok(())
    }

    pub fn matches(&self, combination: &Combination) -> bool {
        self.terms
            .iter()
            .all(|(axis, values)| combination.get(axis).is_some_and(|v| values.contains(&v)))
    }

    /// Whether the filter constrains `axis` at all.
    pub fn names(&self, axis: &str) -> bool {
        self.terms.contains_key(axis)
    }

    /// The value the filter pins an axis to, if it names exactly one.
    pub fn single(&self, axis: &str) -> Option<&str> {
        match self.terms.get(axis).map(Vec::as_slice) {
            Some([one]) => Some(one),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn require_narrows_what_the_user_filtered() {
        let c = crate::Combination::host(crate::Dataset::Cifar10, "resnet18", "native");
        let user = Filter::parse("compiler=native|ort-opt").unwrap();
        let native = user.clone().require("compiler", ["native"]).unwrap();
        assert!(native.matches(&c));
        assert_eq!(native.single("compiler"), Some("native"));
        let none = user.require("compiler", ["tract-opt"]).unwrap();
        assert!(!none.matches(&c));
        let fresh = Filter::default().require("device", ["host", "i7"]).unwrap();
        assert!(fresh.matches(&c));
        assert!(Filter::default().require("colour", ["red"]).is_err());
    }

    use super::*;

    #[test]
    fn alternatives_and_conjunctions() {
        let f = Filter::parse("model=resnet18|vgg16, device=i7,model=mobilenetv1").unwrap();
        assert_eq!(f.terms["model"], vec!["resnet18", "vgg16", "mobilenetv1"]);
        assert_eq!(f.single("device"), Some("i7"));
        assert_eq!(f.single("model"), None);
        assert!(f.names("device") && !f.names("batch"));
    }

    #[test]
    fn malformed_terms_are_explained() {
        assert!(
            Filter::parse("model")
                .unwrap_err()
                .to_string()
                .contains("axis=value")
        );
        assert!(
            Filter::parse("colour=red")
                .unwrap_err()
                .to_string()
                .contains("valid axes: dataset, model")
        );
        assert!(Filter::parse("model=").is_err());
        assert_eq!(Filter::parse("").unwrap(), Filter::default());
    }
}
