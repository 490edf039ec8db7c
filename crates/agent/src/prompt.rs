//! The system prompt, built at run time: identity, runtime facts (OS, date, time
//! zone, model, workspace), the workspace's `AGENTS.md`, `SOUL.md`, `USER.md` and
//! `MEMORY.md` (each size-bounded with a truncation note), the tool list, one line
//! per skill in `workspace/skills/*/SKILL.md`, and the memory-recall rule.
//! [`build`] is pure; [`read_workspace_files`] is the small blocking reader.
//!
//! Invariant: never includes secrets — only workspace files and tool descriptions.

use crate::message::ToolSpec;
use crate::tools::jail::Jail;
use chrono::{DateTime, FixedOffset};
use std::path::{Path, PathBuf};

/// `MEMORY.md` is cut beyond this many bytes.
pub const MEMORY_MD_MAX_BYTES: usize = 8 * 1024;
/// `AGENTS.md`, `SOUL.md`, `USER.md` are cut beyond this many bytes.
pub const OTHER_MD_MAX_BYTES: usize = 12 * 1024;
/// At most this many skills are listed.
pub const MAX_SKILLS: usize = 64;

/// A skill found in `skills/<name>/SKILL.md`.
#[derive(Debug, Clone, PartialEq)]
pub struct Skill {
    pub name: String,
    pub summary: String,
    /// Relative to the workspace.
    pub path: String,
}

/// Workspace files the prompt is built from (`None` when absent).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorkspaceFiles {
    pub agents_md: Option<String>,
    pub soul_md: Option<String>,
    pub user_md: Option<String>,
    pub memory_md: Option<String>,
    pub skills: Vec<Skill>,
}

/// Everything [`build`] needs.
#[derive(Debug, Clone)]
pub struct PromptInputs<'a> {
    pub now: DateTime<FixedOffset>,
    /// A time zone label (e.g. `UTC+02:00` or an IANA name if known).
    pub timezone: String,
    pub os: String,
    pub model: String,
    pub workspace: &'a Path,
    pub files: &'a WorkspaceFiles,
    pub tools: &'a [ToolSpec],
}

/// The memory-recall rule (also checked by tests).
pub const MEMORY_RULE: &str = "Before answering anything about the past (what was said or done \
in earlier conversations, prior work, earlier decisions, the user's preferences, people, dates or \
todos), search memory first: memory_search, then memory_get of a citation for the lines or the \
turns around it. Put a date or a time (\"last week\", \"on May 4th\") in the query when the question \
has one. Cite what you used (path#line, and the day a past conversation was held). If memory has \
nothing, say you checked.";

/// Build the system prompt. Pure.
pub fn build(p: &PromptInputs<'_>) -> String {
    let mut s = String::new();
    s.push_str(
        "You are claw, a personal AI assistant running in the user's terminal. You live on \
         your memory: a workspace of Markdown notes (MEMORY.md, memory/*.md) and past session \
         transcripts, searchable with your memory tools. Be direct and concise; use tools when \
         they help, and say plainly when you could not do something.\n",
    );

    s.push_str("\n## Runtime\n");
    s.push_str(&format!("- OS: {}\n", p.os));
    s.push_str(&format!(
        "- Date and time: {} ({})\n",
        p.now.format("%A %Y-%m-%d %H:%M"),
        p.timezone
    ));
    s.push_str(&format!("- Model: {}\n", p.model));
    s.push_str(&format!("- Workspace: {}\n", p.workspace.display()));
    s.push_str(&format!(
        "- Today's memory file: memory/{}.md\n",
        p.now.format("%Y-%m-%d")
    ));

    s.push_str("\n## Memory\n");
    s.push_str(MEMORY_RULE);
    s.push_str(
        "\nWhen you learn a durable fact (a decision, a preference, a person, a date), write it \
         to today's memory file with write_file or edit_file.\n",
    );

    for (title, content, max) in [
        (
            "AGENTS.md (operating instructions)",
            &p.files.agents_md,
            OTHER_MD_MAX_BYTES,
        ),
        ("SOUL.md (persona)", &p.files.soul_md, OTHER_MD_MAX_BYTES),
        (
            "USER.md (about the user)",
            &p.files.user_md,
            OTHER_MD_MAX_BYTES,
        ),
        (
            "MEMORY.md (long-term memory)",
            &p.files.memory_md,
            MEMORY_MD_MAX_BYTES,
        ),
    ] {
        if let Some(text) = content.as_deref().map(str::trim).filter(|t| !t.is_empty()) {
            s.push_str(&format!("\n## {title}\n"));
            s.push_str(&bounded(text, max));
            s.push('\n');
        }
    }

    if !p.tools.is_empty() {
        s.push_str("\n## Tools\n");
        for t in p.tools {
            let first_line = t.description.lines().next().unwrap_or("").trim();
            s.push_str(&format!("- {}: {}\n", t.name, first_line));
        }
    }

    if !p.files.skills.is_empty() {
        s.push_str("\n## Skills\nRead a skill's SKILL.md with read_file before using it.\n");
        for sk in p.files.skills.iter().take(MAX_SKILLS) {
            s.push_str(&format!("- {} ({}): {}\n", sk.name, sk.path, sk.summary));
        }
    }
    s
}

/// `text` cut to at most `max` bytes (on a line or char boundary) with a note.
pub fn bounded(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let cut = text[..end]
        .rfind('\n')
        .filter(|&i| i > max / 2)
        .unwrap_or(end);
    format!(
        "{}\n[… truncated: {} of {} bytes shown; read the file for the rest]",
        &text[..cut],
        cut,
        text.len()
    )
}

/// One-line summary of a SKILL.md: the front matter's `description:`, else the
/// first non-empty line that is not a heading. Capped at 200 characters.
pub fn skill_summary(text: &str) -> Option<String> {
    let mut lines = text.lines().peekable();
    let mut from_body = None;
    if lines.peek().map(|l| l.trim()) == Some("---") {
        lines.next();
        for line in lines.by_ref() {
            let l = line.trim();
            if l == "---" {
                break;
            }
            if let Some(rest) = l.strip_prefix("description:") {
                let d = rest.trim().trim_matches(|c| c == '"' || c == '\'').trim();
                if !d.is_empty() {
                    return Some(cap(d));
                }
            }
        }
    }
    for line in lines {
        let l = line.trim();
        if !l.is_empty() && !l.starts_with('#') {
            from_body = Some(cap(l));
            break;
        }
    }
    from_body
}

fn cap(s: &str) -> String {
    if s.chars().count() <= 200 {
        s.to_string()
    } else {
        let head: String = s.chars().take(199).collect();
        format!("{head}…")
    }
}

/// Read the prompt's files from the workspace. Blocking: call via `spawn_blocking`.
/// Missing or unreadable files are left out (they are optional).
///
/// The workspace is writable by tools, so each file is opened through the
/// file jail ([`Jail`], always on here whatever `agent.jail_to_workspace`
/// says): a `MEMORY.md` or `skills/x/SKILL.md` that is a symlink to a file
/// outside the workspace (`/etc/shadow`, `~/.ssh/id_ed25519`) is left out,
/// never sent to the model.
pub fn read_workspace_files(workspace: &Path) -> WorkspaceFiles {
    let Ok(jail) = Jail::new(workspace, true) else {
        return WorkspaceFiles::default();
    };
    let read = |name: &str| read_capped(&jail, name, 256 * 1024);
    let mut skills = Vec::new();
    let skills_dir = workspace.join("skills");
    if let Ok(entries) = std::fs::read_dir(&skills_dir) {
        let mut dirs: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.join("SKILL.md").is_file())
            .collect();
        dirs.sort();
        for dir in dirs.into_iter().take(MAX_SKILLS) {
            let name = dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if let Some(summary) = read_capped(&jail, &format!("skills/{name}/SKILL.md"), 64 * 1024)
                .and_then(|t| skill_summary(&t))
            {
                skills.push(Skill {
                    path: format!("skills/{name}/SKILL.md"),
                    name,
                    summary,
                });
            }
        }
    }
    WorkspaceFiles {
        agents_md: read("AGENTS.md"),
        soul_md: read("SOUL.md"),
        user_md: read("USER.md"),
        memory_md: read("MEMORY.md"),
        skills,
    }
}

/// `rel` beneath the workspace, at most `max` bytes; `None` when missing,
/// unreadable or leading out of the workspace.
fn read_capped(jail: &Jail, rel: &str, max: u64) -> Option<String> {
    use std::io::Read;
    let f = jail.open_read(rel).ok()?.handle;
    let mut buf = Vec::new();
    f.take(max).read_to_end(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn now() -> DateTime<FixedOffset> {
        FixedOffset::east_opt(2 * 3600)
            .unwrap()
            .with_ymd_and_hms(2024, 5, 1, 9, 30, 0)
            .unwrap()
    }

    /// The prompt on linux for the workspace `/ws` at [`now`].
    fn build_at_ws(
        timezone: &str,
        model: &str,
        files: &WorkspaceFiles,
        tools: &[ToolSpec],
    ) -> String {
        build(&PromptInputs {
            now: now(),
            timezone: timezone.into(),
            os: "linux".into(),
            model: model.into(),
            workspace: Path::new("/ws"),
            files,
            tools,
        })
    }

    fn tool(name: &str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: format!("Does {name}.\nMore detail."),
            parameters: serde_json::json!({}),
        }
    }

    #[test]
    fn prompt_has_every_section() {
        let files = WorkspaceFiles {
            agents_md: Some("Always be brief.".into()),
            soul_md: Some("Warm.".into()),
            user_md: Some("Name: Ada".into()),
            memory_md: Some("- Project X ships in June".into()),
            skills: vec![Skill {
                name: "weather".into(),
                summary: "Get the forecast".into(),
                path: "skills/weather/SKILL.md".into(),
            }],
        };
        let tools = [tool("read_file"), tool("memory_search")];
        let s = build_at_ws("UTC+02:00", "smol", &files, &tools);
        for needle in [
            "You are claw",
            "OS: linux",
            "Wednesday 2024-05-01 09:30 (UTC+02:00)",
            "Model: smol",
            "Workspace: /ws",
            "memory/2024-05-01.md",
            "Always be brief.",
            "Warm.",
            "Name: Ada",
            "Project X ships in June",
            "- read_file: Does read_file.",
            "- memory_search: Does memory_search.",
            "weather (skills/weather/SKILL.md): Get the forecast",
            MEMORY_RULE,
        ] {
            assert!(s.contains(needle), "missing {needle:?} in:\n{s}");
        }
        assert!(
            !s.contains("More detail."),
            "only the first description line"
        );
    }

    #[test]
    fn absent_files_leave_no_empty_sections() {
        let files = WorkspaceFiles::default();
        let s = build_at_ws("UTC", "m", &files, &[]);
        assert!(!s.contains("MEMORY.md (long-term"));
        assert!(!s.contains("## Tools"));
        assert!(!s.contains("## Skills"));
    }

    #[test]
    fn memory_md_is_bounded_with_a_note() {
        let big = "- a fact line that is long enough\n".repeat(1000);
        let out = bounded(&big, MEMORY_MD_MAX_BYTES);
        assert!(out.len() < MEMORY_MD_MAX_BYTES + 120);
        assert!(out.contains("truncated"));
        assert!(out.contains(&format!("of {} bytes", big.len())));
    }

    #[test]
    fn skill_summaries() {
        for (skill, summary) in [
            (
                "---\nname: w\ndescription: \"Weather lookups\"\n---\n# W\nbody",
                Some("Weather lookups"),
            ),
            (
                "# Title\n\nFirst real line.\nSecond.",
                Some("First real line."),
            ),
            ("---\nname: x\n---\n# T\nBody line", Some("Body line")),
            ("# only a heading\n", None),
        ] {
            assert_eq!(skill_summary(skill).as_deref(), summary, "{skill:?}");
        }
    }

    #[test]
    fn reads_files_and_skills_from_disk() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        std::fs::write(ws.join("MEMORY.md"), "remember this").unwrap();
        std::fs::create_dir_all(ws.join("skills/b-skill")).unwrap();
        std::fs::create_dir_all(ws.join("skills/a-skill")).unwrap();
        std::fs::create_dir_all(ws.join("skills/no-file")).unwrap();
        std::fs::write(ws.join("skills/b-skill/SKILL.md"), "# B\nDoes B things").unwrap();
        std::fs::write(
            ws.join("skills/a-skill/SKILL.md"),
            "---\ndescription: Does A\n---\n",
        )
        .unwrap();
        let f = read_workspace_files(ws);
        assert_eq!(f.memory_md.as_deref(), Some("remember this"));
        assert_eq!(f.agents_md, None);
        let names: Vec<&str> = f.skills.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["a-skill", "b-skill"]);
        assert_eq!(f.skills[1].summary, "Does B things");
    }

    /// A tool (a confirmed `exec: ln -s`) can point the prompt's files at any
    /// file the user can read: those links are left out of the prompt.
    #[test]
    fn files_linked_out_of_the_workspace_never_reach_the_prompt() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let ws = dir.path();
        let secret = outside.path().join("shadow");
        std::fs::write(&secret, "root:SECRET-HASH:19000\n").unwrap();
        std::fs::write(outside.path().join("SKILL.md"), "# S\nSECRET-SKILL").unwrap();
        for name in ["MEMORY.md", "AGENTS.md", "USER.md"] {
            std::os::unix::fs::symlink(&secret, ws.join(name)).unwrap();
        }
        std::fs::create_dir_all(ws.join("skills/leak")).unwrap();
        std::os::unix::fs::symlink(
            outside.path().join("SKILL.md"),
            ws.join("skills/leak/SKILL.md"),
        )
        .unwrap();
        std::os::unix::fs::symlink(outside.path(), ws.join("skills/outdir")).unwrap();
        // Positive controls: a link that stays inside the workspace is read.
        std::fs::write(ws.join("soul-real.md"), "be kind").unwrap();
        std::os::unix::fs::symlink(ws.join("soul-real.md"), ws.join("SOUL.md")).unwrap();
        std::fs::create_dir_all(ws.join("skills/ok")).unwrap();
        std::fs::write(ws.join("skills/ok/SKILL.md"), "# OK\nDoes OK things").unwrap();

        let f = read_workspace_files(ws);
        assert_eq!(f.memory_md, None);
        assert_eq!(f.agents_md, None);
        assert_eq!(f.user_md, None);
        assert_eq!(f.soul_md.as_deref(), Some("be kind"));
        let names: Vec<&str> = f.skills.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["ok"]);
    }
}
