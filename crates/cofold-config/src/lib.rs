//! Configuration resolution for cofold.
//!
//! Reads the copapo configuration (the user file, the nearest `.copapo.json`, the file
//! `$COPAPO_CONFIG` names), overlays `COPAPO_*` and `COFOLD_*` variables, and resolves providers and
//! model ids.
