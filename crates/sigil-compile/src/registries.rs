//! The registries a namespace's ImagePolicy may name. A policy's hosts are
//! where sigil's webhook sends requests for the images of its namespace
//! (the hosts its `images[].glob` can select, its `source[].oci`
//! registries), so a tenant names only registries a cluster admin allows:
//! those listed for ImagePolicies (`--image-policy-registry`, chart value
//! `imagePolicies.allowedRegistries`), or by default those the cluster's
//! ClusterImagePolicies name themselves.

use sigil_api::cip::ClusterImagePolicySpec;
use sigil_policy::glob::{Glob, HostPattern, HostSet, ImageName};

/// Where the allowed registries come from, as messages name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allowed {
    /// The admin's list.
    Listed,
    /// The registries the ClusterImagePolicies name.
    ClusterPolicies,
}

/// The registries ImagePolicies may name.
#[derive(Debug, Clone)]
pub struct TenantRegistries {
    hosts: HostSet,
    from: Allowed,
}

impl TenantRegistries {
    /// The registries an admin listed: host globs as `--allow-registry`
    /// takes them (`registry.example`, `mirror.example:5000`,
    /// `*.corp.example`).
    pub fn listed<'a>(patterns: impl IntoIterator<Item = &'a str>) -> Result<Self, String> {
        let mut hosts = HostSet::new();
        for p in patterns {
            let pattern = HostPattern::allow(p).map_err(|_| {
                format!(
                    "`{p}` is not a registry host (letters, digits, `-_.:[]`, `*` within a \
                     name), e.g. registry.example:5000 or *.corp.example"
                )
            })?;
            hosts.add_pattern(pattern);
        }
        Ok(Self {
            hosts,
            from: Allowed::Listed,
        })
    }

    /// The registries `cluster_policies` name (their globs' hosts and
    /// `source[].oci` registries); a glob that does not compile names none.
    pub fn of_cluster_policies<'a>(
        cluster_policies: impl IntoIterator<Item = &'a ClusterImagePolicySpec>,
    ) -> Self {
        let mut out = Self {
            hosts: HostSet::new(),
            from: Allowed::ClusterPolicies,
        };
        for spec in cluster_policies {
            out.add_cluster_policy(spec);
        }
        out
    }

    /// Adds the registries a ClusterImagePolicy names (to a list built by
    /// [`Self::of_cluster_policies`]).
    pub fn add_cluster_policy(&mut self, spec: &ClusterImagePolicySpec) {
        for image in &spec.images {
            if let Ok(glob) = Glob::compile(&image.glob) {
                self.hosts.add_glob(&glob);
            }
        }
        for source in spec.authorities.iter().flat_map(|a| &a.sources) {
            if let Some(name) = source.oci.as_deref().and_then(|o| ImageName::parse(o).ok()) {
                self.hosts.add_host(&name.registry);
            }
        }
    }

    /// Where the list comes from.
    pub fn from(&self) -> Allowed {
        self.from
    }

    /// What `spec`, a namespace's ImagePolicy, names outside these
    /// registries: one line per field, empty when it stays within them.
    /// Globs and `source[].oci` that do not parse are the compiler's to
    /// report.
    pub fn problems(&self, spec: &ClusterImagePolicySpec) -> Vec<String> {
        let allowed = match self.from {
            Allowed::Listed => {
                "the registries the admin allows ImagePolicies to name (controller flag \
                 --image-policy-registry, chart value imagePolicies.allowedRegistries)"
            }
            Allowed::ClusterPolicies => {
                "the registries the cluster's ClusterImagePolicies name (an admin may list \
                 others: controller flag --image-policy-registry, chart value \
                 imagePolicies.allowedRegistries)"
            }
        };
        let mut problems = Vec::new();
        for (i, image) in spec.images.iter().enumerate() {
            if let Ok(glob) = Glob::compile(&image.glob)
                && !self.hosts.covers(&glob)
            {
                problems.push(format!(
                    "spec.images[{i}].glob: `{}` can select images on registries outside \
                     {allowed}; sigil would contact them for this namespace: name a registry \
                     among those, or ask an admin",
                    image.glob
                ));
            }
        }
        for (i, a) in spec.authorities.iter().enumerate() {
            for (j, source) in a.sources.iter().enumerate() {
                if let Some(name) = source.oci.as_deref().and_then(|o| ImageName::parse(o).ok())
                    && !self.hosts.contains(&name.registry)
                {
                    problems.push(format!(
                        "spec.authorities[{i}].source[{j}].oci: registry `{}` is not among \
                         {allowed}: keep the signatures on one of those, or ask an admin",
                        name.registry
                    ));
                }
            }
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::*;

    fn spec(yaml: &str) -> ClusterImagePolicySpec {
        serde_saphyr::from_str(yaml).unwrap()
    }

    #[test]
    fn an_image_policy_names_only_registries_the_cluster_policies_name_by_default() {
        let cluster = [
            spec(
                "images: [{glob: \"registry.example/**\"}]\nauthorities: [{static: {action: pass}}]\n",
            ),
            spec(
                "images: [{glob: \"ghcr.io/org/*\"}]\nauthorities: [{key: {data: k}, source: \
                 [{oci: sigs.example/org/sigs}]}]\n",
            ),
        ];
        let allowed = TenantRegistries::of_cluster_policies(&cluster);
        let fits = spec(
            "images: [{glob: \"registry.example/team/**\"}, {glob: \"ghcr.io/org/app\"}]\n\
             authorities: [{key: {data: k}, source: [{oci: sigs.example/team}]}]\n",
        );
        assert!(allowed.problems(&fits).is_empty());
        let reaches = spec(
            "images: [{glob: \"**\"}, {glob: \"kubernetes.default.svc/x\"}]\n\
             authorities: [{key: {data: k}, source: [{oci: \"10.96.0.1:443/x\"}]}]\n",
        );
        let problems = allowed.problems(&reaches);
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(
            problems[0].starts_with(
                "spec.images[0].glob: `**` can select images on registries outside the \
                 registries the cluster's ClusterImagePolicies name"
            ),
            "{problems:?}"
        );
        assert!(problems[1].starts_with("spec.images[1].glob: `kubernetes.default.svc/x`"));
        assert!(
            problems[2].starts_with(
                "spec.authorities[0].source[0].oci: registry `10.96.0.1:443` is not among"
            ),
            "{problems:?}"
        );
    }

    #[test]
    fn an_admins_list_replaces_the_cluster_policies_registries() {
        let allowed = TenantRegistries::listed(["*.corp.example", "mirror.example:5000"]).unwrap();
        assert_eq!(allowed.from(), Allowed::Listed);
        assert!(
            allowed
                .problems(&spec(
                    "images: [{glob: \"team.corp.example/**\"}]\nauthorities: [{static: {action: pass}}]\n"
                ))
                .is_empty()
        );
        let elsewhere = allowed.problems(&spec(
            "images: [{glob: \"ghcr.io/**\"}]\nauthorities: [{static: {action: pass}}]\n",
        ));
        assert!(
            elsewhere[0].contains("--image-policy-registry"),
            "{elsewhere:?}"
        );
        let err = TenantRegistries::listed(["bad host"]).unwrap_err();
        assert!(err.contains("is not a registry host"), "{err}");
    }
}
