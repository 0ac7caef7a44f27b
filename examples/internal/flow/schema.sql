-- The examples' product tables. Plain SQL, safe to run more than once.

-- "Add weeks to a course": a chapter job writes chapters, lessons and
-- lectures, and bumps the course's week count.
CREATE TABLE IF NOT EXISTS courses (
    id     text    PRIMARY KEY,
    title  text    NOT NULL,
    status text    NOT NULL DEFAULT 'DRAFT'
           CHECK (status IN ('DRAFT', 'GENERATING', 'READY', 'FAILED')),
    weeks  integer NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS chapters (
    id         bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    course_id  text    NOT NULL REFERENCES courses (id),
    -- The execution that wrote the row.
    job_id     uuid    NOT NULL,
    generation bigint  NOT NULL,
    week       integer NOT NULL,
    title      text    NOT NULL
);
CREATE TABLE IF NOT EXISTS lessons (
    id         bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    chapter_id bigint  NOT NULL REFERENCES chapters (id),
    position   integer NOT NULL,
    title      text    NOT NULL
);
CREATE TABLE IF NOT EXISTS lectures (
    id        bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    lesson_id bigint  NOT NULL REFERENCES lessons (id),
    position  integer NOT NULL,
    title     text    NOT NULL,
    body      text    NOT NULL
);

-- Video composition: an encoded file, a slide asset, a content entry, and
-- the seconds billed to the account.
CREATE TABLE IF NOT EXISTS accounts (
    id            text   PRIMARY KEY,
    video_seconds bigint NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS videos (
    id               text    PRIMARY KEY,
    account_id       text    NOT NULL REFERENCES accounts (id),
    title            text    NOT NULL,
    status           text    NOT NULL DEFAULT 'DRAFT'
                     CHECK (status IN ('DRAFT', 'ENCODING', 'READY', 'FAILED', 'DELETED')),
    file_path        text,
    duration_seconds integer
);
CREATE TABLE IF NOT EXISTS assets (
    id         text   PRIMARY KEY,
    video_id   text   NOT NULL REFERENCES videos (id),
    kind       text   NOT NULL,
    -- The execution that last wrote the row.
    job_id     uuid   NOT NULL,
    generation bigint NOT NULL,
    status     text   NOT NULL DEFAULT 'PENDING' CHECK (status IN ('PENDING', 'READY'))
);
CREATE TABLE IF NOT EXISTS contents (
    video_id         text    PRIMARY KEY REFERENCES videos (id),
    title            text    NOT NULL,
    duration_seconds integer NOT NULL,
    published        boolean NOT NULL DEFAULT false
);

-- Export: the source document stays READY whatever becomes of its export.
CREATE TABLE IF NOT EXISTS documents (
    id            text PRIMARY KEY,
    title         text NOT NULL,
    status        text NOT NULL DEFAULT 'READY' CHECK (status IN ('DRAFT', 'READY')),
    export_status text NOT NULL DEFAULT 'NONE'
                  CHECK (export_status IN ('NONE', 'QUEUED', 'DONE', 'FAILED')),
    export_path   text
);
