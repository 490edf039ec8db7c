//! TODO: LLM providers
