//! A fake engine with modelled prefill and decode costs, for fleet-logic tests.
