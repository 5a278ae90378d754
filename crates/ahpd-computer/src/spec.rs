//! A machine's spec as a write's body (or a disposable make) asks for it, merged over its
//! profile and the plugin's options, and checked against what the host allows.

use std::collections::HashMap;

use serde_json::Value;

use crate::ComputerError;
use crate::machines::{Machines, Spec};
use crate::needs::Bind;
use crate::options::{DEFAULT_IMAGE, Profile, image_allowed};

impl Machines {
    /// Refuses an image that is no image name, or that the host does not allow: the plugin's
    /// and the profiles' images always are, others when `images` is empty or one matches.
    fn check_image(&self, image: &str) -> Result<(), ComputerError> {
        if image.starts_with('-') {
            return Err(ComputerError::Invalid(format!(
                "image: {image} is not an image name"
            )));
        }
        let fixed_images: Vec<&str> =
            std::iter::once(self.opts.image.as_deref().unwrap_or(DEFAULT_IMAGE))
                .chain(
                    self.opts
                        .profiles
                        .values()
                        .filter_map(|p| p.image.as_deref()),
                )
                .collect();
        if !self.opts.images.is_empty()
            && !fixed_images.contains(&image)
            && !self.opts.images.iter().any(|pat| image_allowed(pat, image))
        {
            return Err(ComputerError::Invalid(format!(
                "image: {image} is not among the images this host allows"
            )));
        }
        Ok(())
    }

    /// The mounts of a machine (the plugin's, the profile's, the body's when allowed, and its
    /// folder) and that folder.
    fn spec_binds(
        &self,
        p: &Profile,
        body: &serde_json::Map<String, Value>,
    ) -> Result<(Vec<Bind>, Option<String>), ComputerError> {
        let mut binds: Vec<Bind> = self
            .opts
            .mounts
            .iter()
            .filter_map(|m| Bind::parse(m))
            .collect();
        binds.extend(p.mounts.iter().filter_map(|m| Bind::parse(m)));
        let mut folder = p.folder.clone();
        if self.opts.body_mounts {
            if let Some(Value::Array(ms)) = body.get("mounts") {
                for m in ms.iter().filter_map(Value::as_str) {
                    crate::options::check_mount(m)
                        .map_err(|e| ComputerError::Invalid(format!("mounts: {e}")))?;
                    binds.extend(Bind::parse(m));
                }
            }
            if let Some(f) = body.get("folder").and_then(Value::as_str) {
                folder = Some(f.to_owned());
            }
        }
        if let Some(f) = &folder {
            binds.push(Bind {
                source: f.clone(),
                target: f.clone(),
                read_only: false,
            });
        }
        Ok((binds, folder))
    }

    /// The merged spec of a write's body or a disposable make.
    pub fn spec(
        &self,
        id: &str,
        body: &serde_json::Map<String, Value>,
        provider_agents: Vec<String>,
    ) -> Result<(Spec, Option<Profile>), ComputerError> {
        let text = |k: &str| body.get(k).and_then(Value::as_str).map(str::to_owned);
        let profile_name = text("profile");
        let profile = match &profile_name {
            Some(p) => Some(
                self.opts
                    .profile(p)
                    .map_err(|e| ComputerError::Invalid(e.to_string()))?
                    .clone(),
            ),
            None => None,
        };
        let pick = |k: &str, from_profile: Option<&String>, from_plugin: &Option<String>| {
            text(k)
                .or_else(|| from_profile.cloned())
                .or_else(|| from_plugin.clone())
        };
        let p = profile.clone().unwrap_or_default();
        let image = pick("image", p.image.as_ref(), &self.opts.image)
            .unwrap_or_else(|| DEFAULT_IMAGE.to_owned());
        self.check_image(&image)?;
        let (binds, folder) = self.spec_binds(&p, body)?;
        let agents = match body.get("agents") {
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
            _ => p.agents.clone().unwrap_or(provider_agents),
        };
        let spec = Spec {
            id: id.to_owned(),
            image,
            profile: profile_name,
            cpus: pick("cpus", p.cpus.as_ref(), &self.opts.cpus),
            memory: pick("memory", p.memory.as_ref(), &self.opts.memory),
            network: p.network.clone().or_else(|| self.opts.network.clone()),
            user: p.user.clone().or_else(|| self.opts.user.clone()),
            workdir: pick("workdir", p.workdir.as_ref(), &self.opts.workdir).or(folder.clone()),
            binds,
            folder,
            agents,
            labels: HashMap::new(),
        };
        Ok((spec, profile))
    }
}
