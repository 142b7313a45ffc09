-- text in a database that is not UTF-8: every function converts to the
-- model's UTF-8 on the way in and back on the way out, so counts agree
-- with what generation sees
-- (runs after cbllm.sql; the model's tokenizer knows bytes, so accents are several tokens)
SET client_encoding = 'UTF8';
\set accented 'café crème brûlée à la façon de Noël'
SELECT llm_token_count(:'accented') AS utf8_count \gset
SELECT llm_tokenize(:'accented') AS utf8_ids \gset
-- what LATIN1 can hold of the generated text (it is U+0001..U+00FF)
SELECT regexp_replace(llm_generate(:'accented', 8), '[^\u0001-\u00ff]', '?', 'g') AS latin1_text \gset
SET client_encoding = 'UTF8';
CREATE DATABASE regress_cbllm_latin1 TEMPLATE template0 ENCODING 'LATIN1' LOCALE 'C';
CREATE DATABASE regress_cbllm_sqlascii TEMPLATE template0 ENCODING 'SQL_ASCII' LOCALE 'C';
\c regress_cbllm_latin1
SET client_encoding = 'UTF8';
CREATE EXTENSION cbllm;
SHOW server_encoding;
SELECT llm_token_count(:'accented') = :utf8_count AS count_agrees,
       llm_tokenize(:'accented') = :'utf8_ids'::int[] AS ids_agree,
       array_length(llm_tokenize(:'accented'), 1) = llm_token_count(:'accented') AS tokenize_matches_count,
       llm_detokenize(llm_tokenize(:'accented')) = :'accented' AS round_trip,
       llm_generate(:'accented', 8) = :'latin1_text' AS generation_agrees;
-- a character LATIN1 cannot hold comes out as '?': the bytes of U+20AC (the euro sign)
SELECT llm_detokenize(ARRAY[3 + 226, 3 + 130, 3 + 172]) AS euro_in_latin1;
-- streaming converts each piece
SELECT string_agg(p, '' ORDER BY n) = llm_generate(:'accented', 16) AS stream_agrees
FROM llm_generate_stream(:'accented', 16) WITH ORDINALITY AS s(p, n);
\c regress_cbllm_sqlascii
SET client_encoding = 'UTF8';
CREATE EXTENSION cbllm;
-- in SQL_ASCII the bytes must be UTF-8 already, for every function alike
SELECT llm_token_count(:'accented') = :utf8_count AS utf8_bytes_count;
SELECT llm_tokenize(convert_from('\xff'::bytea, 'SQL_ASCII'));
SELECT llm_token_count(convert_from('\xff'::bytea, 'SQL_ASCII'));
SELECT llm_generate(convert_from('\xff'::bytea, 'SQL_ASCII'), 4);
\c cbllm_regression
DROP DATABASE regress_cbllm_latin1;
DROP DATABASE regress_cbllm_sqlascii;
