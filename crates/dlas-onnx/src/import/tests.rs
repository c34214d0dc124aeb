//! The importer on the zoo's own exports and on malformed files; other
//! exporters' files are the crate's fixture tests.

use super::*;
use dlas_zoo::weights::Params;

#[test]
fn export_then_import_gives_the_same_network() {
    // The two largest networks add nothing here but seconds.
    for net in dlas_zoo::catalogue()
        .iter()
        .filter(|n| n.published_params.is_some_and(|p| p < 15_000_000))
    {
        let graph = (net.build)();
        let weights = dlas_zoo::weights::generate(&graph, 5);
        let bytes = crate::export(&graph, &weights);
        let (back, back_weights) = import(&bytes, net.name, net.dataset).unwrap();
        // SiLU is exported as Sigmoid and Mul, so compare what is invariant.
        assert_eq!(back.params(), graph.params(), "{}", net.name);
        assert_eq!(back.macs(), graph.macs(), "{}", net.name);
        assert_eq!(back.output().shape, graph.output().shape);
        let flat = |w: &Weights| -> Vec<f32> {
            w.by_node
                .iter()
                .flatten()
                .flat_map(|p| match p {
                    Params::Conv { weight, bias } => weight
                        .iter()
                        .chain(bias.iter().flatten())
                        .copied()
                        .collect::<Vec<_>>(),
                    Params::BatchNorm {
                        gamma,
                        beta,
                        mean,
                        var,
                    } => [gamma, beta, mean, var]
                        .into_iter()
                        .flatten()
                        .copied()
                        .collect(),
                    Params::Linear { weight, bias } => weight.iter().chain(bias).copied().collect(),
                    Params::LayerNorm { gamma, beta } => {
                        gamma.iter().chain(beta).copied().collect()
                    }
                    Params::Tensor(values) => values.clone(),
                })
                .collect()
        };
        assert_eq!(flat(&back_weights), flat(&weights), "{}", net.name);
    }
}

#[test]
fn first_unsupported_operator_is_named() {
    let graph = (dlas_zoo::catalogue()[0].build)();
    let mut model = crate::model(&graph, &dlas_zoo::weights::generate(&graph, 1));
    let g = model.graph.as_mut().unwrap();
    g.node[1].op_type = "Einsum".into();
    let name = g.node[1].name.clone();
    let bytes = model.encode_to_vec();
    let err = import(&bytes, "x", Dataset::Cifar10)
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        format!(
            "node `{name}` (Einsum): operator `Einsum` is not supported by the native engine; supported: {}",
            SUPPORTED.join(", ")
        )
    );
    assert!(import(b"garbage", "x", Dataset::Cifar10).is_err());
}
