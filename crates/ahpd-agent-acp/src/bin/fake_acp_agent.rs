//! The fake ACP agent the tests spawn (`testkit::fake_acp`).

fn main() {
    testkit::fake_acp::run();
}
