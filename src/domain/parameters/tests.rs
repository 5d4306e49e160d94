use super::*;

fn parsed(prompt: &str) -> (&str, Parameters) {
    Parameters::parse(prompt).unwrap_or_else(|e| panic!("{prompt}: {e}"))
}

fn refused(prompt: &str) -> String {
    Parameters::parse(prompt)
        .map(|(_, p)| format!("accepted: {p:?}"))
        .unwrap_or_else(|e| e.message)
}

#[test]
fn every_parameter_and_alias_is_read_and_left_out_of_the_text() {
    let (text, p) = parsed(
        "a red fox in the snow --ar 16:9 --no trees, cars --seed 42 --chaos 30 --stylize 250 \
         --quality .5 --weird 1000 --tile --style raw --v 6.1 --iw 1.5",
    );
    assert_eq!(text, "a red fox in the snow");
    let want = Parameters {
        aspect: Some("16:9".into()),
        no: Some("trees, cars".into()),
        seed: Some(42),
        chaos: Some(30),
        stylize: Some(250),
        quality: Some(0.5),
        weird: Some(1000),
        tile: true,
        style: Some("raw".into()),
        version: Some("6.1".into()),
        niji: None,
        iw: Some(1.5),
        ..Parameters::default()
    };
    assert_eq!(p, want);
    let (_, aliases) = parsed(
        "x \u{2014}aspect 16:9 --no trees, cars --sameseed 42 --c 30 --s 250 --q 0.5 --w 1000 \
         --TILE --style RAW --version 6.1 --iw 1.5",
    );
    assert_eq!(aliases, want);
    let (_, niji) = parsed("x --niji 6");
    assert_eq!(niji.niji.as_deref(), Some("6"));
}

#[test]
fn ranges_hold_at_their_edges() {
    for (ok, bad, rule) in [
        ("--chaos 0", "--chaos 101", "--chaos must be 0 to 100"),
        ("--chaos 100", "--chaos -1", "--chaos must be 0 to 100"),
        ("--stylize 1000", "--s 1001", "--s must be 0 to 1000"),
        ("--weird 3000", "--w 3001", "--w must be 0 to 3000"),
        ("--iw 3", "--iw 3.01", "--iw must be 0 to 3"),
        ("--iw 0", "--iw 1e0", "--iw must be 0 to 3"),
        ("--quality .25", "--q 0.3", "--q must be .25, .5, 1 or 2"),
        ("--q 2", "--q NaN", "--q must be .25, .5, 1 or 2"),
        (
            "--seed 4294967295",
            "--seed 4294967296",
            "--seed must be an integer",
        ),
        (
            "--seed 0",
            "--seed x",
            "--seed must be an integer from 0 to 4294967295",
        ),
        ("--ar 1:4", "--ar 0:1", "--ar must look like \"W:H\""),
        (
            "--ar 4:1",
            "--ar 5:1",
            "--ar ratio must be between 1:4 and 4:1",
        ),
        ("--v 7", "--v 8", "--v must be one of 1, 2"),
        ("--niji 4", "--niji 3", "--niji must be 4, 5 or 6"),
        ("--style raw", "--style cute", "--style must be raw"),
    ] {
        assert!(Parameters::parse(&format!("a cat {ok}")).is_ok(), "{ok}");
        let got = refused(&format!("a cat {bad}"));
        assert!(got.starts_with(rule), "{bad}: {got}");
    }
    assert_eq!(parsed("a --chaos 7").1.chaos, Some(7));
    assert_eq!(parsed("a --q 1").1.quality, Some(1.0));
}

#[test]
fn each_error_names_the_parameter_and_the_rule() {
    let no_words = "--no needs words after it";
    for (prompt, error) in [
        ("a cat --foo 3", "unknown parameter --foo"),
        ("a cat --stopp 50", "unknown parameter --stopp"),
        (
            "a cat --fast --relax",
            "--fast and --relax cannot be used together",
        ),
        ("a cat --r 2 --repeat 3", "--repeat given twice"),
        ("a cat --raw --style raw", "--style given twice"),
        (
            "a cat --draft 2",
            "--draft takes no value (got \"2\"); parameters come at the end of the prompt",
        ),
        ("a cat --sref", "--sref needs a value after it"),
        (
            "a cat --sref cute",
            "--sref takes image URLs, style codes (digits) or random (got \"cute\")",
        ),
        ("a cat --cref 123", "--cref takes image URLs (got \"123\")"),
        (
            "a cat --p a-b",
            "--p takes profile codes, letters and digits (got \"a-b\")",
        ),
        (
            "a::1.2.3 cat",
            "the weight ::1.2.3 must be a number, like ::2 or ::-0.5",
        ),
        ("::2 cat", "the weight ::2 must follow words"),
        (
            "a cat::-1 dog::0.5",
            "the :: weights must add up to more than 0",
        ),
        ("a cat --ar 1:1 --ar 2:1", "--ar given twice"),
        ("a cat --ar 1:1 --aspect 2:1", "--aspect given twice"),
        ("a cat --tile --tile", "--tile given twice"),
        ("a cat --no", no_words),
        ("a cat --no --ar 1:1", no_words),
        ("a cat --chaos", "--chaos must be 0 to 100"),
        (
            "a cat --ar 16:9 in the snow",
            "--ar takes one value (got \"16:9 in the snow\"); parameters come at the end of \
             the prompt",
        ),
        (
            "a cat --v 6 --niji 6",
            "--v and --niji cannot be used together",
        ),
        (
            "--ar 16:9",
            "has only parameters; the words to draw come before them",
        ),
    ] {
        assert_eq!(refused(prompt), error, "{prompt}");
    }
    assert!(refused("a cat --tile with stripes").starts_with("--tile takes no value"));
}

#[test]
fn dashes_inside_words_are_text() {
    for prompt in [
        "rock--paper--scissors",
        "a well--known face",
        "an em\u{2014}dash, and \u{2014} alone",
        "a countdown -- 3 2 1 --5",
        "https://example.com/a--b.png a cat",
    ] {
        assert_eq!(parsed(prompt), (prompt, Parameters::default()), "{prompt}");
        assert_eq!(prompt_text(prompt), prompt);
    }
    // An image URL leads the text, untouched.
    let (text, p) = parsed("https://example.com/a.png a cat --iw 2");
    assert_eq!(text, "https://example.com/a.png a cat");
    assert_eq!(p.iw, Some(2.0));
    // `--no` runs to the next parameter, whatever its words.
    assert_eq!(
        parsed("x --no a -- b --tile").1.no.as_deref(),
        Some("a -- b")
    );
}

#[test]
fn a_stored_prompt_gives_its_text_with_or_without_parameters() {
    for (stored, text) in [
        ("a red fox --ar 16:9 --seed 42 --no snow", "a red fox"),
        ("a red fox \u{2014}ar 16:9", "a red fox"),
        ("a red fox", "a red fox"),
        ("--ar 1:1", ""),
    ] {
        assert_eq!(prompt_text(stored), text, "{stored}");
    }
}

#[test]
fn a_follow_up_inherits_all_but_the_seed() {
    let (_, p) = parsed("a --seed 3 --tile --chaos 5");
    let inherited = p.inherited();
    assert_eq!(inherited.seed, None);
    assert!(inherited.tile);
    assert_eq!(inherited.chaos, Some(5));
}

#[test]
fn todays_parameters_are_read_with_their_aliases() {
    let (text, p) = parsed(
        "a cabin in the woods --sref https://a.example/s.png 123 random --sw 500 --sv 4 --cref \
         https://a.example/c.png --cw 50 --oref data:image/png;base64,AA== --ow 300 --p abc 7 \
         --stop 80 --draft --exp 25 --raw --turbo --r 3",
    );
    assert_eq!(text, "a cabin in the woods");
    let want = Parameters {
        sref: vec![
            "https://a.example/s.png".into(),
            "123".into(),
            "random".into(),
        ],
        sw: Some(500),
        sv: Some(4),
        cref: vec!["https://a.example/c.png".into()],
        cw: Some(50),
        oref: Some("data:image/png;base64,AA==".into()),
        ow: Some(300),
        personalize: Some(vec!["abc".into(), "7".into()]),
        stop: Some(80),
        draft: true,
        exp: Some(25),
        style: Some("raw".into()),
        process_mode: Some("turbo".into()),
        repeat: Some(3),
        ..Parameters::default()
    };
    assert_eq!(p, want);
    assert_eq!(parsed("x --personalize").1.personalize, Some(vec![]));
    assert_eq!(parsed("x --relax").1.process_mode.as_deref(), Some("relax"));
    assert_eq!(parsed("x --repeat 40").1.repeat, Some(40));
    for (ok, bad, rule) in [
        ("--stop 10", "--stop 9", "--stop must be 10 to 100"),
        ("--stop 100", "--stop 101", "--stop must be 10 to 100"),
        ("--r 1", "--r 0", "--r must be 1 to 40"),
        ("--repeat 40", "--repeat 41", "--repeat must be 1 to 40"),
        ("--exp 100", "--exp 101", "--exp must be 0 to 100"),
        ("--sw 1000", "--sw 1001", "--sw must be 0 to 1000"),
        ("--sv 6", "--sv 7", "--sv must be 1 to 6"),
        ("--cw 0", "--cw 101", "--cw must be 0 to 100"),
        ("--ow 1000", "--ow 1001", "--ow must be 0 to 1000"),
    ] {
        assert!(Parameters::parse(&format!("a cat {ok}")).is_ok(), "{ok}");
        assert_eq!(refused(&format!("a cat {bad}")), rule, "{bad}");
    }
}

#[test]
fn video_parameters_are_unsupported_operations() {
    for name in ["video", "motion", "loop", "end"] {
        let e = Parameters::parse(&format!("a cat --{name} low")).unwrap_err();
        assert_eq!(e.code, "unsupported_operation", "{name}");
        assert!(e.message.starts_with(&format!("--{name}")), "{}", e.message);
    }
}

#[test]
fn weights_split_the_text_and_keep_it_as_written() {
    let (text, p) = parsed("space ship::2 planet::-0.5 stars --ar 2:1");
    assert_eq!(text, "space ship::2 planet::-0.5 stars");
    let w = |t: &str, weight: f64| Weighted {
        text: t.into(),
        weight,
    };
    assert_eq!(
        p.weights,
        vec![w("space ship", 2.0), w("planet", -0.5), w("stars", 1.0)]
    );
    assert_eq!(
        p.weighted_prompt(text),
        "(space ship:2) (planet:-0.5) (stars:1)"
    );
    assert_eq!(
        parsed("hot:: dog").1.weights,
        vec![w("hot", 1.0), w("dog", 1.0)]
    );
    assert_eq!(
        parsed("a (b)::3").1.weighted_prompt("a (b)::3"),
        "(a \\(b\\):3)"
    );
    // No `::`, no weights; a URL's colons are text.
    assert!(parsed("a fox").1.weights.is_empty());
    assert!(parsed("http://[::1]/a.png a fox").1.weights.is_empty());
    assert_eq!(parsed("a fox").1.weighted_prompt("a fox"), "a fox");
}

#[test]
fn style_codes_pick_the_same_look_and_random_is_recorded_as_a_code() {
    let code = |prompt: &str| parsed(prompt).1.style_code();
    assert_eq!(code("a --sref 42"), code("b --sref 42"));
    assert_ne!(code("a --sref 42"), code("a --sref 43"));
    assert_eq!(code("a --p"), code("b --personalize"));
    assert_eq!(code("a --sref https://x.example/a.png"), None);
    let (_, mut p) = parsed("a --sref random 5");
    p.pick_random_codes(|| 77);
    assert_eq!(p.sref, vec!["77".to_string(), "5".to_string()]);
}

/// Words a prompt is made of in the property test below: every parameter (and near misses),
/// values in and out of range, weights, and other text.
const VOCABULARY: &[&str] = &[
    "--ar",
    "--aspect",
    "--chaos",
    "--c",
    "--no",
    "--q",
    "--quality",
    "--seed",
    "--stop",
    "--style",
    "--stylize",
    "--s",
    "--tile",
    "--weird",
    "--w",
    "--iw",
    "--v",
    "--version",
    "--niji",
    "--sref",
    "--sw",
    "--sv",
    "--cref",
    "--cw",
    "--oref",
    "--ow",
    "--p",
    "--personalize",
    "--repeat",
    "--r",
    "--draft",
    "--exp",
    "--raw",
    "--fast",
    "--relax",
    "--turbo",
    "--video",
    "--motion",
    "--loop",
    "--end",
    "--zzz",
    "—ar",
    "--",
    "-",
    "16:9",
    "1:1",
    "0:0",
    "0",
    "1",
    "42",
    "100",
    "1000",
    "4294967296",
    "-5",
    ".5",
    "1.5",
    "abc",
    "raw",
    "random",
    "https://example.com/a.png",
    "data:image/png;base64,AAAA",
    "::",
    "::2",
    "::-0.5",
    "cat::",
    "fox::1.5",
    "a",
    "red",
    "fox",
    "ｎｏ",
    "{a,b}",
    "\u{202e}",
    "\t",
    "\n",
];

use proptest::prelude::*;

proptest::proptest! {
    #![proptest_config(crate::domain::fuzz_config())]

    /// Any prompt is its text and parameters, or a refusal with a code and a message; the text
    /// is the prompt's beginning and holds no parameter of its own.
    #[test]
    fn any_prompt_is_read_in_one_pass_or_refused(
        words in proptest::collection::vec(
            proptest::prop_oneof![
                8 => proptest::sample::select(VOCABULARY).prop_map(str::to_string),
                1 => "[ -~]{0,12}",
                1 => "\\PC{0,6}",
            ],
            0..16,
        ),
        joiner in proptest::sample::select(vec![" ", "  ", "\t", " \u{3000}"]),
    ) {
        let prompt = words.join(joiner);
        match Parameters::parse(&prompt) {
            Ok((text, _)) => {
                prop_assert!(prompt.starts_with(text));
                let again = Parameters::parse(text);
                prop_assert!(matches!(again, Ok((same, _)) if same == text), "{again:?}");
            }
            Err(refused) => {
                prop_assert!(!refused.code.is_empty());
                prop_assert!(!refused.message.is_empty());
            }
        }
    }
}
