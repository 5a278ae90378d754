//! Prints the module graph of every crate in the workspace (or of the packages named on the
//! command line): each file module with the modules it uses, then the edges between each
//! crate's top-level modules. Exits 1 when a crate has a module circle, naming it, and 2 when
//! the tree cannot be read. Run it as `.ci/modgraph [PACKAGE…]`.

use std::process::ExitCode;

use testkit::tidy;

fn main() -> ExitCode {
    let only: Vec<String> = std::env::args().skip(1).collect();
    let graphs = match tidy::workspace_root().and_then(|root| tidy::module_graphs(&root)) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("modgraph: {e}");
            return ExitCode::from(2);
        }
    };
    let mut circles = 0;
    for graph in graphs
        .iter()
        .filter(|g| only.is_empty() || only.contains(&g.package))
    {
        print!("{}", graph.render());
        for circle in graph.circles() {
            circles += 1;
            println!("  CIRCLE: {}", circle.join(" -> "));
        }
        println!();
    }
    if circles > 0 {
        eprintln!("modgraph: {circles} module circle(s); each is named above");
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}
